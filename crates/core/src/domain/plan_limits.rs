//! A plan's agent limits, and what they refuse for agents and their
//! knowledge files.

const MIB: usize = 1024 * 1024;

/// The largest knowledge file extraction accepts, whatever the plan.
pub const MAX_KNOWLEDGE_FILE_BYTES: usize = 50 * MIB;

/// An organization's agent limits (its plan's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLimits {
    pub plan: String,
    pub max_agents: i32,
    pub tools_per_agent: i32,
    pub max_iterations: i32,
    pub knowledge_files_per_agent: i32,
    pub max_file_size_mb: i32,
}

/// Why the plan refuses an agent as configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanRefusal {
    #[error("Agents are not available on the {0} plan")]
    NotOnPlan(String),
    #[error("Agent limit reached: the {plan} plan allows {max} agents")]
    TooManyAgents { plan: String, max: i32 },
    #[error("The {plan} plan allows at most {max} tools per agent")]
    TooManyTools { plan: String, max: i32 },
    #[error("The {plan} plan allows at most {max} iterations per run (max_iterations)")]
    TooManyIterations { plan: String, max: i32 },
}

impl AgentLimits {
    /// Checks an agent's configuration (not the agent count) against the plan.
    pub fn admit(&self, tools: usize, max_iterations: i32) -> Result<(), PlanRefusal> {
        if self.max_agents <= 0 {
            return Err(PlanRefusal::NotOnPlan(self.plan.clone()));
        }
        if tools > self.tools_per_agent.max(0) as usize {
            return Err(PlanRefusal::TooManyTools {
                plan: self.plan.clone(),
                max: self.tools_per_agent,
            });
        }
        if max_iterations > self.max_iterations {
            return Err(PlanRefusal::TooManyIterations {
                plan: self.plan.clone(),
                max: self.max_iterations,
            });
        }
        Ok(())
    }
}

/// Why the plan refuses an upload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UploadRefusal {
    /// The plan has no agents (Free): 403, as for agents.
    #[error("Agents are not available on the {0} plan")]
    NotOnPlan(String),
    /// The agent has the plan's number of files: 402.
    #[error("Knowledge file limit reached: the {plan} plan allows {max} knowledge files per agent")]
    TooManyFiles { plan: String, max: i32 },
    /// Larger than the plan's maximum file size: 400 naming `file`.
    #[error("file is too large: the {plan} plan allows files up to {max_mb} MB")]
    TooLarge { plan: String, max_mb: i32 },
}

/// The largest file the plan accepts, in bytes (never above what extraction
/// accepts).
pub fn max_file_bytes(limits: &AgentLimits) -> usize {
    (limits.max_file_size_mb.max(0) as usize)
        .saturating_mul(MIB)
        .min(MAX_KNOWLEDGE_FILE_BYTES)
}

/// Knowledge files need agents on the plan.
pub fn admit_plan(limits: &AgentLimits) -> Result<(), UploadRefusal> {
    if limits.max_agents <= 0 {
        return Err(UploadRefusal::NotOnPlan(limits.plan.clone()));
    }
    Ok(())
}

/// One more file next to the agent's `existing` ones.
pub fn admit_count(limits: &AgentLimits, existing: i64) -> Result<(), UploadRefusal> {
    admit_plan(limits)?;
    if existing >= i64::from(limits.knowledge_files_per_agent) {
        return Err(UploadRefusal::TooManyFiles {
            plan: limits.plan.clone(),
            max: limits.knowledge_files_per_agent,
        });
    }
    Ok(())
}

/// A file of `size` bytes.
pub fn admit_size(limits: &AgentLimits, size: usize) -> Result<(), UploadRefusal> {
    if size > max_file_bytes(limits) {
        return Err(UploadRefusal::TooLarge {
            plan: limits.plan.clone(),
            max_mb: limits.max_file_size_mb,
        });
    }
    Ok(())
}
