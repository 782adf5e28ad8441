//! The soak's stack: every component its own OS process (`unigen-stack`),
//! two of each kind. Slot 0 of each kind lives the whole run (its RSS is
//! compared like with like); slot 1 is the one the faults kill or restart.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use unigen_core::config::Settings;

use crate::process::StackProcess;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Api,
    Worker,
    Scheduler,
}

impl Role {
    fn component(self) -> &'static str {
        match self {
            Role::Api => "api",
            Role::Worker => "worker",
            Role::Scheduler => "scheduler",
        }
    }
}

/// One process slot: its current incarnation and the RSS samples of every
/// incarnation so far.
pub(crate) struct Slot {
    pub role: Role,
    pub index: usize,
    pub incarnation: u32,
    pub process: Option<StackProcess>,
    pub pid: u32,
    pub started: Instant,
    /// `(incarnation, pid, started, samples (time, VmRSS KiB))`.
    pub history: Vec<Incarnation>,
}

pub(crate) struct Incarnation {
    pub number: u32,
    pub pid: u32,
    pub started: Instant,
    pub samples: Vec<(Instant, u64)>,
}

impl Slot {
    pub(crate) fn name(&self) -> String {
        format!("{}-{}", self.role.component(), self.index)
    }
}

pub(crate) struct Stack {
    binary: String,
    settings: Settings,
    env: Vec<(String, String)>,
    dir: PathBuf,
    pub slots: Vec<Slot>,
    /// Base URLs of the API slots, in slot order (what the load uses).
    pub api_urls: Arc<RwLock<Vec<String>>>,
    client: reqwest::Client,
}

impl Stack {
    pub(crate) fn new(
        binary: &str,
        settings: Settings,
        env: Vec<(String, String)>,
        dir: PathBuf,
    ) -> Stack {
        Stack {
            binary: binary.to_owned(),
            settings,
            env,
            dir,
            slots: Vec::new(),
            api_urls: Arc::new(RwLock::new(Vec::new())),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// Starts two APIs, then (signing URLs for the first) two workers and
    /// two schedulers.
    pub(crate) async fn start_all(&mut self) -> anyhow::Result<()> {
        for index in 0..2 {
            let slot = self.start(Role::Api, index, 0).await?;
            self.slots.push(slot);
        }
        self.settings.http.public_base_url = self.api_urls.read().expect("urls")[0].clone();
        for role in [Role::Worker, Role::Scheduler] {
            for index in 0..2 {
                let slot = self.start(role, index, 0).await?;
                self.slots.push(slot);
            }
        }
        Ok(())
    }

    async fn start(&self, role: Role, index: usize, incarnation: u32) -> anyhow::Result<Slot> {
        let mut env = self.env.clone();
        let addr_file = self
            .dir
            .join(format!("{}-{index}-{incarnation}.addr", role.component()));
        if role == Role::Api {
            env.push((
                "UNIGEN_STACK_ADDR_FILE".into(),
                addr_file.display().to_string(),
            ));
        }
        let process =
            StackProcess::start_with_env(&self.binary, role.component(), &self.settings, &env);
        let pid = process.id();
        let started = Instant::now();
        if role == Role::Api {
            let url = self.wait_for_api(&addr_file).await?;
            let mut urls = self.api_urls.write().expect("urls");
            if urls.len() <= index {
                urls.resize(index + 1, String::new());
            }
            urls[index] = url;
        }
        Ok(Slot {
            role,
            index,
            incarnation,
            process: Some(process),
            pid,
            started,
            history: vec![Incarnation {
                number: incarnation,
                pid,
                started,
                samples: Vec::new(),
            }],
        })
    }

    /// The address the API wrote, then its readiness (PostgreSQL and its
    /// LISTEN connection; the broker may be cut at that moment).
    async fn wait_for_api(&self, addr_file: &std::path::Path) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let url = loop {
            tick.tick().await;
            if let Ok(addr) = std::fs::read_to_string(addr_file) {
                break format!("http://{}", addr.trim());
            }
            anyhow::ensure!(Instant::now() < deadline, "the API never wrote its address");
        };
        loop {
            tick.tick().await;
            if let Ok(response) = self.client.get(format!("{url}/readyz")).send().await {
                let body: serde_json::Value = response.json().await.unwrap_or_default();
                if body["checks"]["postgres"] == true && body["checks"]["listener"] == true {
                    return Ok(url);
                }
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the API at {url} never became ready"
            );
        }
    }

    fn slot_mut(&mut self, role: Role, index: usize) -> &mut Slot {
        self.slots
            .iter_mut()
            .find(|s| s.role == role && s.index == index)
            .expect("a slot")
    }

    /// kill -9 of slot `index` of `role`, then a new incarnation.
    pub(crate) async fn kill_and_replace(
        &mut self,
        role: Role,
        index: usize,
    ) -> anyhow::Result<()> {
        let slot = self.slot_mut(role, index);
        if let Some(mut process) = slot.process.take() {
            process.kill().await;
        }
        self.replace(role, index).await
    }

    /// SIGTERM of slot `index` of `role` (it drains and exits), then a new
    /// incarnation.
    pub(crate) async fn restart(&mut self, role: Role, index: usize) -> anyhow::Result<()> {
        let slot = self.slot_mut(role, index);
        if let Some(mut process) = slot.process.take() {
            let status = process.terminate(Duration::from_secs(90)).await;
            anyhow::ensure!(
                status.success(),
                "{} stopped with {status} after SIGTERM",
                slot.name()
            );
        }
        self.replace(role, index).await
    }

    async fn replace(&mut self, role: Role, index: usize) -> anyhow::Result<()> {
        let next = self.slot_mut(role, index).incarnation + 1;
        let fresh = self
            .start(role, index, next)
            .await
            .with_context(|| format!("restarting {}-{index}", role.component()))?;
        let slot = self.slot_mut(role, index);
        slot.incarnation = next;
        slot.process = fresh.process;
        slot.pid = fresh.pid;
        slot.started = fresh.started;
        slot.history.extend(fresh.history);
        Ok(())
    }

    /// One VmRSS sample of every running process.
    pub(crate) fn sample_rss(&mut self) {
        let now = Instant::now();
        for slot in &mut self.slots {
            if slot.process.is_none() {
                continue;
            }
            if let Some(kib) = vm_rss_kib(slot.pid)
                && let Some(current) = slot.history.last_mut()
            {
                current.samples.push((now, kib));
            }
        }
    }

    /// Whether every slot's process is still running (none died by itself).
    pub(crate) fn dead(&mut self) -> Vec<String> {
        let mut dead = Vec::new();
        for slot in &mut self.slots {
            if vm_rss_kib(slot.pid).is_none() {
                dead.push(slot.name());
            }
        }
        dead
    }

    /// SIGTERM to everything (killed on drop if it does not stop).
    pub(crate) async fn stop_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut process) = slot.process.take() {
                let pid = nix::unistd::Pid::from_raw(i32::try_from(process.id()).unwrap_or(0));
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let _ = tokio::time::timeout(Duration::from_secs(30), process.wait()).await;
            }
        }
    }
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB (`None` once the process is gone).
pub(crate) fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    if status
        .lines()
        .any(|l| l.starts_with("State:") && l.contains("zombie"))
    {
        return None;
    }
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}
