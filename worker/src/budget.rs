//! How many jobs of each tool run at once (`[worker]` budgets, see
//! `WorkerSettings`).
//!
//! A job waits either on a vendor (a model on a network adapter: fal,
//! Replicate, OpenAI, ElevenLabs...) or on this CPU (a model on the
//! in-process `local` adapter). Each tool gets a budget per kind, so a slow
//! tool cannot starve a fast one and rendering never oversubscribes the
//! cores while remote calls wait by the hundred. A tool's queue is gated
//! twice: its consumer holds at most the sum of the budgets of the kinds
//! its catalogue models use (also its prefetch), and a claimed job then
//! takes a permit of its model's kind before any work.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use unigen_core::config::{ModelEntry, WorkerSettings};
use unigen_core::domain::{ModelCategory, Tool};

/// Remote jobs at once per tool when nothing is configured.
pub const DEFAULT_REMOTE: usize = 512;
/// Memory set aside per remote job in flight for the default's cap (a
/// vendor's output is held in memory while it is stored).
const REMOTE_JOB_BYTES: u64 = 16 << 20;
/// The knowledge and batch queues' concurrency when `worker.concurrency`
/// is 0 (their work has its own limits: `knowledge.concurrent_extractions`,
/// `batches.*`).
pub const DEFAULT_OTHER_QUEUES: usize = 4;

/// Where a job's time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Waiting on a vendor over the network.
    Remote,
    /// Rendering on this machine (`local` adapter).
    Local,
}

impl Kind {
    /// The `fixture` adapter (benchmarks) mostly waits, like a vendor.
    pub fn of(model: &ModelEntry) -> Self {
        if model.adapter == "local" {
            Self::Local
        } else {
            Self::Remote
        }
    }
}

/// What the defaults depend on, read once at start.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub cores: usize,
    /// Memory available at start, when known.
    pub available_bytes: Option<u64>,
}

impl Machine {
    pub fn detect() -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            available_bytes: available_memory(),
        }
    }

    fn default_remote(self) -> usize {
        let cap = self
            .available_bytes
            .map_or(usize::MAX, |bytes| (bytes / REMOTE_JOB_BYTES) as usize);
        DEFAULT_REMOTE.min(cap).max(self.cores)
    }
}

/// `MemAvailable` of `/proc/meminfo` (Linux); `None` elsewhere.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One tool's budgets: jobs at once per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub remote: usize,
    pub local: usize,
}

/// The budgets of `tool` from the settings, most specific first.
pub fn limits(settings: &WorkerSettings, tool: Tool, machine: Machine) -> Limits {
    let per_tool = settings.per_tool.get(tool.as_str());
    let global = (settings.concurrency > 0).then_some(settings.concurrency);
    Limits {
        remote: per_tool
            .and_then(|t| t.remote_concurrency)
            .or(global)
            .or(settings.remote_concurrency)
            .unwrap_or_else(|| machine.default_remote()),
        local: per_tool
            .and_then(|t| t.local_concurrency)
            .or(global)
            .or(settings.local_concurrency)
            .unwrap_or(machine.cores),
    }
}

/// Whether `tool`'s jobs may name `model` (as the API resolves them: the
/// category, and the capability where a category serves several tools).
fn serves(tool: Tool, model: &ModelEntry) -> bool {
    let has = |capability: &str| model.capabilities.iter().any(|c| c == capability);
    match tool {
        Tool::Image => model.category == ModelCategory::Image && has("text_to_image"),
        Tool::ImageEdit => model.category == ModelCategory::Image && has("image_edit"),
        Tool::Video => model.category == ModelCategory::Video,
        Tool::Music => model.category == ModelCategory::Music,
        Tool::Tts => model.category == ModelCategory::Audio && has("text_to_speech"),
        Tool::Stt => model.category == ModelCategory::Audio && has("speech_to_text"),
        Tool::Responses => model.category == ModelCategory::Chat,
    }
}

/// One tool's gates.
struct ToolBudget {
    /// Claimed jobs at once: the sum of the kinds' budgets (and the prefetch).
    queue: Arc<Semaphore>,
    prefetch: usize,
    remote: Arc<Semaphore>,
    local: Arc<Semaphore>,
    limits: Limits,
}

/// Every tool's budgets in this worker process.
pub struct Budgets {
    tools: HashMap<Tool, ToolBudget>,
}

impl Budgets {
    pub fn new(
        settings: &WorkerSettings,
        tools: &[Tool],
        models: &[ModelEntry],
        machine: Machine,
    ) -> Self {
        let tools = tools
            .iter()
            .map(|&tool| {
                let limits = limits(settings, tool, machine);
                let served = models.iter().filter(|m| serves(tool, m));
                let (mut remote, mut local) = (false, false);
                for model in served {
                    match Kind::of(model) {
                        Kind::Remote => remote = true,
                        Kind::Local => local = true,
                    }
                }
                // No model yet (a catalogue being filled): either kind may come.
                let prefetch = match (remote, local) {
                    (true, false) => limits.remote,
                    (false, true) => limits.local,
                    _ => limits.remote + limits.local,
                };
                let budget = ToolBudget {
                    queue: Arc::new(Semaphore::new(prefetch)),
                    prefetch,
                    remote: Arc::new(Semaphore::new(limits.remote)),
                    local: Arc::new(Semaphore::new(limits.local)),
                    limits,
                };
                (tool, budget)
            })
            .collect();
        Self { tools }
    }

    /// The gate of `tool`'s queue consumer and its prefetch.
    pub fn queue(&self, tool: Tool) -> (Arc<Semaphore>, usize) {
        let budget = &self.tools[&tool];
        (budget.queue.clone(), budget.prefetch)
    }

    pub fn limits(&self, tool: Tool) -> Limits {
        self.tools[&tool].limits
    }

    /// Waits for a permit of `kind` in `tool`'s budget; held while the job
    /// runs.
    pub async fn acquire(&self, tool: Tool, kind: Kind) -> OwnedSemaphorePermit {
        let budget = &self.tools[&tool];
        let semaphore = match kind {
            Kind::Remote => &budget.remote,
            Kind::Local => &budget.local,
        };
        semaphore
            .clone()
            .acquire_owned()
            .await
            .expect("budgets are never closed")
    }
}

#[cfg(test)]
mod tests {
    use unigen_core::config::{Settings, ToolConcurrency};

    use super::*;

    const MACHINE: Machine = Machine {
        cores: 2,
        available_bytes: Some(20 << 30),
    };

    fn worker() -> WorkerSettings {
        Settings::load_with(None, &[]).unwrap().worker
    }

    #[test]
    fn remote_work_runs_wide_and_local_work_at_the_cores_by_default() {
        let limits = limits(&worker(), Tool::Video, MACHINE);
        assert_eq!(
            limits,
            Limits {
                remote: 512,
                local: 2
            }
        );
        // Memory caps the remote default, never below the cores.
        let small = Machine {
            cores: 2,
            available_bytes: Some(1 << 30),
        };
        assert_eq!(super::limits(&worker(), Tool::Video, small).remote, 64);
        let tiny = Machine {
            cores: 2,
            available_bytes: Some(1 << 20),
        };
        assert_eq!(super::limits(&worker(), Tool::Video, tiny).remote, 2);
    }

    #[test]
    fn settings_override_the_defaults_most_specific_first() {
        let mut settings = worker();
        settings.remote_concurrency = Some(100);
        settings.local_concurrency = Some(3);
        assert_eq!(
            limits(&settings, Tool::Image, MACHINE),
            Limits {
                remote: 100,
                local: 3
            }
        );
        // The old single setting still sets every budget.
        settings.concurrency = 4;
        assert_eq!(
            limits(&settings, Tool::Image, MACHINE),
            Limits {
                remote: 4,
                local: 4
            }
        );
        settings.per_tool.insert(
            "image".into(),
            ToolConcurrency {
                remote_concurrency: Some(64),
                local_concurrency: None,
            },
        );
        assert_eq!(
            limits(&settings, Tool::Image, MACHINE),
            Limits {
                remote: 64,
                local: 4
            }
        );
        assert_eq!(
            limits(&settings, Tool::Video, MACHINE),
            Limits {
                remote: 4,
                local: 4
            }
        );
    }

    #[test]
    fn a_layered_key_sets_one_tools_budget() {
        // The key of `UNIGEN__WORKER__PER_TOOL__VIDEO__REMOTE_CONCURRENCY`.
        let settings = Settings::load_with(
            None,
            &[("worker.per_tool.video.remote_concurrency", 96.into())],
        )
        .unwrap();
        assert_eq!(limits(&settings.worker, Tool::Video, MACHINE).remote, 96);
        assert_eq!(limits(&settings.worker, Tool::Image, MACHINE).remote, 512);
        let zero = Settings::load_with(
            None,
            &[("worker.per_tool.video.local_concurrency", 0.into())],
        );
        assert!(zero.unwrap_err().to_string().contains("at least 1"));
        let unknown = Settings::load_with(
            None,
            &[("worker.per_tool.teleport.local_concurrency", 1.into())],
        );
        assert!(unknown.unwrap_err().to_string().contains("no such tool"));
    }

    #[test]
    fn a_tools_prefetch_is_the_sum_of_the_kinds_its_models_use() {
        let settings = Settings::load_with(None, &[]).unwrap();
        let mut models = settings.models.clone();
        let budgets = Budgets::new(&settings.worker, &[Tool::Video], &models, MACHINE);
        // The default catalogue renders locally only.
        assert_eq!(budgets.queue(Tool::Video).1, 2);
        let mut remote = models
            .iter()
            .find(|m| m.category == ModelCategory::Video)
            .unwrap()
            .clone();
        remote.id = "fal/video".into();
        remote.adapter = "fal".into();
        models.push(remote);
        let budgets = Budgets::new(&settings.worker, &[Tool::Video], &models, MACHINE);
        assert_eq!(budgets.queue(Tool::Video).1, 514);
        models.retain(|m| m.adapter == "fal");
        let budgets = Budgets::new(&settings.worker, &[Tool::Video], &models, MACHINE);
        assert_eq!(budgets.queue(Tool::Video).1, 512);
        // Whisper is an upstream: speech to text is remote, speech local.
        let budgets = Budgets::new(
            &settings.worker,
            &[Tool::Tts, Tool::Stt],
            &settings.models,
            MACHINE,
        );
        assert_eq!(budgets.queue(Tool::Tts).1, 2);
        assert_eq!(budgets.queue(Tool::Stt).1, 512);
    }
}
