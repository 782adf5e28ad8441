//! Test harness: [`TestApp::spawn`] starts api + worker + scheduler in this
//! process against the machine's real PostgreSQL and RabbitMQ, isolated per
//! test: a fresh database cloned from a migrated template, a unique RabbitMQ
//! name prefix (queues expire once unused), and a private files directory.

pub mod dashboard;
mod database;
mod env;
mod process;
mod proxy;
mod s3;
pub mod soak;

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;
use unigen_core::domain::{ApiKeyMaterial, Scope};
use unigen_db::models::{NewApiKey, NewOrganization};
use unigen_db::queries;
use uuid::Uuid;

pub use database::TestDatabase;
pub use env::POSTGRES_ADMIN_URL;
use env::amqp_url;
pub use process::StackProcess;
pub use proxy::FaultProxy;
pub use s3::{S3S_FS_VERSION, S3Server};

/// Which binaries to start and how to configure them.
pub struct TestOptions {
    pub worker: bool,
    /// Point the `whisper` upstream at a transcription sidecar.
    pub whisper: bool,
    pub scheduler: bool,
    /// Applied to every component's settings.
    pub configure: Box<dyn FnOnce(&mut Settings) + Send>,
    /// Applied to the API's settings only (after `configure`).
    pub configure_api: Box<dyn FnOnce(&mut Settings) + Send>,
}

impl Default for TestOptions {
    fn default() -> Self {
        Self {
            worker: true,
            whisper: false,
            scheduler: true,
            configure: Box::new(|_| {}),
            configure_api: Box::new(|_| {}),
        }
    }
}

impl TestOptions {
    pub fn without_worker(mut self) -> Self {
        self.worker = false;
        self
    }

    /// No scheduler: tests start their own with [`TestApp::spawn_scheduler`].
    pub fn without_scheduler(mut self) -> Self {
        self.scheduler = false;
        self
    }

    pub fn with_whisper(mut self) -> Self {
        self.whisper = true;
        self
    }

    pub fn configure(mut self, f: impl FnOnce(&mut Settings) + Send + 'static) -> Self {
        self.configure = Box::new(f);
        self
    }

    pub fn configure_api(mut self, f: impl FnOnce(&mut Settings) + Send + 'static) -> Self {
        self.configure_api = Box::new(f);
        self
    }
}

/// A test's own channel to its job queues (see [`TestApp::raw_publisher`]).
pub struct RawPublisher {
    _connection: lapin::Connection,
    channel: lapin::Channel,
    topology: unigen_jobs::queue::Topology,
}

impl RawPublisher {
    /// Publishes `payload` to `tool`'s queue and waits for the broker.
    pub async fn publish(&self, tool: &str, payload: &[u8]) {
        self.publish_to(self.topology.exchange(), tool, payload)
            .await;
    }

    /// Puts `payload` straight into `tool`'s dead-letter queue, as the
    /// broker does with a message no consumer could take.
    pub async fn dead_letter(&self, tool: &str, payload: &[u8]) {
        self.publish_to(self.topology.dead_letter_exchange(), tool, payload)
            .await;
    }

    async fn publish_to(&self, exchange: String, tool: &str, payload: &[u8]) {
        self.channel
            .basic_publish(
                exchange.into(),
                tool.into(),
                lapin::options::BasicPublishOptions::default(),
                payload,
                Default::default(),
            )
            .await
            .expect("publishing")
            .await
            .expect("the broker's answer");
    }

    /// Messages waiting in `tool`'s dead-letter queue.
    pub async fn dead_letters(&self, tool: &str) -> u32 {
        self.channel
            .queue_declare(
                self.topology.dead_letter_queue(tool).into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .expect("the dead-letter queue exists")
            .message_count()
    }

    /// A job message for `job_id`, as the API would publish it.
    pub async fn publish_job(&self, tool: &str, job_id: &str) {
        let message = unigen_jobs::queue::JobMessage {
            job_id: job_id.parse().expect("a job id"),
            tool: tool.into(),
            attempt: 0,
        };
        self.publish(tool, &serde_json::to_vec(&message).expect("JSON"))
            .await;
    }
}

/// A running stack plus an organization and an all-scopes key.
pub struct TestApp {
    pub base_url: String,
    pub client: reqwest::Client,
    pub settings: Settings,
    pub org_id: Uuid,
    pub key: String,
    pub db: TestDatabase,
    shutdown: CancellationToken,
    worker_shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    files_dir: std::path::PathBuf,
    /// A sidecar this test started (killed when the test ends).
    _whisper: Option<tokio::process::Child>,
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with(TestOptions::default()).await
    }

    pub async fn spawn_with(options: TestOptions) -> TestApp {
        Self::try_spawn(options)
            .await
            .expect("starting the test stack")
    }

    async fn try_spawn(options: TestOptions) -> anyhow::Result<TestApp> {
        init_logging();
        let db = TestDatabase::create().await?;
        let tag = Uuid::new_v4().simple().to_string();
        let files_dir = std::env::temp_dir().join(format!("unigen-test-{}", &tag[..12]));
        let mut settings = Settings::load_with(None, &[])?;
        settings.database.url = db.url.clone();
        settings.database.pool_size = 8;
        settings.rabbitmq.url = amqp_url();
        settings.rabbitmq.prefix = format!("test.{}.", &tag[..12]);
        settings.rabbitmq.queue_expires_ms = Some(60_000);
        // Hundreds of quorum queues created and expired per run stall a
        // 2-core broker for seconds; classic queues behave the same for the
        // pipeline. `pipeline::the_pipeline_runs_on_quorum_queues` keeps
        // the production queue type covered.
        settings.rabbitmq.queue_type = "classic".into();
        settings.http.host = "127.0.0.1".into();
        settings.http.port = 0;
        settings.http.public_base_url = String::new();
        settings.storage.dir = files_dir.clone();
        // The API and the worker refuse the built-in secret outside dev mode.
        settings.storage.url_secret = format!("test-{}", Uuid::new_v4().simple());
        settings.worker.tools = unigen_core::domain::Tool::ALL
            .iter()
            .map(|t| t.as_str().to_owned())
            .chain([
                unigen_jobs::queue::KNOWLEDGE_QUEUE.to_owned(),
                unigen_jobs::batches::BATCH_QUEUE.to_owned(),
            ])
            .collect();
        settings.worker.concurrency = 4;
        settings.worker.grace_seconds = 2;
        settings.worker.metrics_addr = String::new();
        settings.scheduler.tick_ms = 100;
        settings.scheduler.metrics_addr = String::new();
        settings.scheduler.relay_after_seconds = 1;
        settings.knowledge.republish_after_seconds = 1;
        settings.fetch.allow_private_addresses = true;
        // Tests change plans and keys with SQL and expect the very next
        // request to see it; the cache's own tests turn it on.
        settings.http.key_cache_seconds = 0;
        // Blocks of credits an API process holds for sync requests go back
        // soon after the last request, so tests see settled balances.
        settings.metering.idle_ms = 10;
        // Webhook receivers in tests listen on loopback over plain http.
        settings.webhooks.allow_private_addresses = true;
        let mut whisper_child = None;
        if options.whisper {
            let (url, child) = whisper_sidecar().await?;
            whisper_child = child;
            if let Some(upstream) = settings.upstreams.get_mut("whisper") {
                upstream.base_url = url;
            }
        }
        (options.configure)(&mut settings);
        let mut api_settings = settings.clone();
        (options.configure_api)(&mut api_settings);

        let shutdown = CancellationToken::new();
        let worker_shutdown = CancellationToken::new();
        let api = unigen_api::spawn(api_settings, shutdown.clone()).await?;
        // The other components sign URLs for the API's address too.
        settings.http.public_base_url = format!("http://{}", api.addr);
        let mut tasks = vec![tokio::spawn(async move {
            if let Ok(Err(err)) = api.task.await {
                eprintln!("api stopped with an error: {err:#}");
            }
        })];
        if options.worker {
            let (settings, token) = (settings.clone(), worker_shutdown.clone());
            tasks.push(tokio::spawn(async move {
                if let Err(err) = unigen_worker::run(settings, token).await {
                    eprintln!("worker stopped with an error: {err:#}");
                }
            }));
        }
        if options.scheduler {
            let (settings, token) = (settings.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                if let Err(err) = unigen_scheduler::run(settings, token).await {
                    eprintln!("scheduler stopped with an error: {err:#}");
                }
            }));
        }
        let base_url = format!("http://{}", api.addr);
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let mut app = TestApp {
            base_url,
            client,
            settings,
            org_id: Uuid::nil(),
            key: String::new(),
            db,
            shutdown,
            worker_shutdown,
            tasks,
            files_dir,
            _whisper: whisper_child,
        };
        app.org_id = app.create_org("Test org", "pro").await;
        app.key = app.create_key(app.org_id, &["all"], None).await;
        app.wait_until_ready().await?;
        Ok(app)
    }

    async fn wait_until_ready(&self) -> anyhow::Result<()> {
        // Postgres and the LISTEN connection; the broker may be down on purpose.
        for _ in 0..100 {
            if let Ok(response) = self.client.get(self.url("/readyz")).send().await {
                let body: Value = response.json().await.unwrap_or_default();
                if body["checks"]["postgres"] == true && body["checks"]["listener"] == true {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("the API never became ready")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Starts another API process on the same database and broker (as a
    /// second replica behind a load balancer would be); returns its base URL.
    pub async fn spawn_extra_api(&mut self) -> String {
        let api = unigen_api::spawn(self.settings.clone(), self.shutdown.clone())
            .await
            .expect("starting a second API");
        let base_url = format!("http://{}", api.addr);
        self.tasks.push(tokio::spawn(async move {
            if let Ok(Err(err)) = api.task.await {
                eprintln!("extra api stopped with an error: {err:#}");
            }
        }));
        base_url
    }

    /// Runs one SQL statement on the test's database (arranging states the
    /// API would take long to reach, such as a nearly used-up bucket).
    pub async fn sql(&self, statement: &str) {
        self.db
            .client()
            .await
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    pub async fn create_org(&self, name: &str, plan: &str) -> Uuid {
        let mut conn = self.db.connect().await;
        let new = NewOrganization {
            id: Uuid::now_v7(),
            name,
            email: None,
            plan_code: plan,
        };
        queries::orgs::create(&mut conn, &new)
            .await
            .expect("creating an org")
            .id
    }

    /// A key for `org` with these scopes (`["all"]` for every scope).
    pub async fn create_key(
        &self,
        org: Uuid,
        scopes: &[&str],
        expires_at: Option<DateTime<Utc>>,
    ) -> String {
        let scopes = Scope::parse_list(&scopes.join(",")).expect("valid scopes");
        let material = ApiKeyMaterial::generate().expect("random key");
        let mut conn = self.db.connect().await;
        queries::keys::insert(
            &mut conn,
            &NewApiKey {
                id: Uuid::now_v7(),
                org_id: org,
                name: "test key",
                key_hash: &material.hash,
                key_prefix: &material.display_prefix,
                scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
                expires_at,
                created_by_key: None,
                created_by_member: None,
            },
        )
        .await
        .expect("creating a key");
        material.plaintext
    }

    pub async fn post_json(&self, path: &str, key: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .expect("POST")
    }

    pub async fn get(&self, path: &str, key: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .expect("GET")
    }

    pub async fn delete(&self, path: &str, key: &str) -> reqwest::Response {
        self.client
            .delete(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .expect("DELETE")
    }

    /// `POST /api/v1/images/generations?async=true` with the default key; the job id.
    pub async fn submit_image_async(&self, body: &Value) -> String {
        let response = self
            .post_json("/api/v1/images/generations?async=true", &self.key, body)
            .await;
        assert_eq!(response.status(), 202, "async submit");
        let body: Value = response.json().await.expect("JSON");
        body["id"].as_str().expect("job id").to_owned()
    }

    pub async fn job(&self, id: &str) -> Value {
        let response = self.get(&format!("/api/v1/jobs/{id}"), &self.key).await;
        assert_eq!(response.status(), 200, "GET job {id}");
        response.json().await.expect("JSON")
    }

    /// Waits (long polls, as a client would) until the job reaches a
    /// terminal state. Few requests: the plan's rate limit applies to tests.
    pub async fn wait_for_job(&self, id: &str, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let response = self
                .get(&format!("/api/v1/jobs/{id}?poll=true"), &self.key)
                .await;
            assert_eq!(response.status(), 200, "GET job {id}?poll=true");
            let job: Value = response.json().await.expect("JSON");
            if matches!(
                job["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} did not finish in {timeout:?}: {job}"
            );
        }
    }

    /// Polls until the job has this status.
    pub async fn wait_for_status(&self, id: &str, status: &str, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let job = self.job(id).await;
            if job["status"] == status {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} never became {status}: {job}"
            );
            // Gentle on the key's rate limit (the plan's, as for any client).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Downloads a URL the API handed out.
    pub async fn download(&self, url: &str) -> reqwest::Response {
        self.client.get(url).send().await.expect("download")
    }

    /// Sends the API (and the in-process scheduler, which shares its
    /// signal) the graceful shutdown SIGTERM starts in the binaries.
    pub fn stop_api(&self) {
        self.shutdown.cancel();
    }

    /// Starts the default worker's graceful shutdown.
    pub fn stop_worker(&self) {
        self.worker_shutdown.cancel();
    }

    /// Starts another worker process-equivalent; cancel the token to stop it.
    pub fn spawn_worker(&mut self, configure: impl FnOnce(&mut Settings)) -> CancellationToken {
        let mut settings = self.settings.clone();
        configure(&mut settings);
        let token = CancellationToken::new();
        let stop = token.clone();
        self.tasks.push(tokio::spawn(async move {
            if let Err(err) = unigen_worker::run(settings, stop).await {
                eprintln!("worker stopped with an error: {err:#}");
            }
        }));
        token
    }

    /// Starts another scheduler process-equivalent. Abort the handle to kill
    /// it mid-flight (its tasks die with it); it stops with the app anyway.
    pub fn spawn_scheduler(&self, configure: impl FnOnce(&mut Settings)) -> JoinHandle<()> {
        let mut settings = self.settings.clone();
        configure(&mut settings);
        let stop = self.shutdown.child_token();
        tokio::spawn(async move {
            if let Err(err) = unigen_scheduler::run(settings, stop).await {
                eprintln!("scheduler stopped with an error: {err:#}");
            }
        })
    }

    /// Starts `component` (`worker` or `scheduler`) as its own OS process:
    /// `binary` is this package's `unigen-stack`
    /// (`env!("CARGO_BIN_EXE_unigen-stack")` in a test).
    pub fn spawn_process(
        &self,
        binary: &str,
        component: &str,
        configure: impl FnOnce(&mut Settings),
    ) -> StackProcess {
        let mut settings = self.settings.clone();
        configure(&mut settings);
        StackProcess::start(binary, component, &settings)
    }

    /// A channel to the test's job exchange, to publish what the API never
    /// would (duplicates, poison messages).
    pub async fn raw_publisher(&self) -> RawPublisher {
        let connection = unigen_jobs::queue::connect(&self.settings.rabbitmq.url, "test")
            .await
            .expect("connecting to RabbitMQ");
        let channel = connection.create_channel().await.expect("a channel");
        RawPublisher {
            _connection: connection,
            channel,
            topology: unigen_jobs::queue::Topology::new(&self.settings.rabbitmq),
        }
    }

    /// How many times the job was claimed.
    pub async fn attempt_of(&self, id: &str) -> i32 {
        let id: Uuid = id.parse().expect("a job id");
        self.db
            .client()
            .await
            .query_one("SELECT attempt FROM jobs WHERE id = $1", &[&id])
            .await
            .expect("job row")
            .get(0)
    }

    /// The outbox, oldest first: `(type, data)`.
    pub async fn events(&self) -> Vec<(String, Value)> {
        let rows = self
            .db
            .client()
            .await
            .query("SELECT type, data FROM events ORDER BY created_at, id", &[])
            .await
            .expect("events");
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    }

    pub async fn count_jobs(&self) -> i64 {
        self.db.scalar_i64("SELECT count(*) FROM jobs").await
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.worker_shutdown.cancel();
        for task in &self.tasks {
            task.abort();
        }
        let _ = std::fs::remove_dir_all(&self.files_dir);
    }
}

/// Logs of the stack go to the test's output (shown for failing tests).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,lapin=warn,actix_server=warn")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// The shared sidecar of the run (`UNIGEN_TEST_WHISPER_URL`, started by
/// scripts/test), or one started for this test from `.venv`.
async fn whisper_sidecar() -> anyhow::Result<(String, Option<tokio::process::Child>)> {
    if let Ok(url) = std::env::var("UNIGEN_TEST_WHISPER_URL") {
        return Ok((url, None));
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = tokio::process::Command::new(root.join(".venv/bin/python"))
        .arg(root.join("sidecars/whisper/server.py"))
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the Whisper sidecar (run sidecars/whisper/setup.sh first)")?;
    let health = format!("http://127.0.0.1:{port}/health");
    for _ in 0..120 {
        if reqwest::get(&health)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok((format!("http://127.0.0.1:{port}/v1"), Some(child)));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    anyhow::bail!("the Whisper sidecar did not become healthy")
}

/// Reads a JSON body, failing with the status and text when it is not JSON.
pub async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text)
        .with_context(|| format!("status {status}, body {text}"))
        .expect("JSON body");
    (status, body)
}

/// An `[upstreams.*]` entry for a fake OpenAI-compatible server at `url`.
pub fn fake_upstream(url: &str) -> unigen_core::config::UpstreamSettings {
    serde_json::from_value(serde_json::json!({
        "base_url": format!("{url}/v1"), "api_key": "sk-upstream-secret", "timeout_seconds": 10
    }))
    .expect("a valid upstream entry")
}

/// A standard-tier chat model `id` served by `upstream` (an `[upstreams.*]`
/// name) as `gpt-upstream`, at 2 credits per 1,000 prompt tokens and 6 per
/// 1,000 completion tokens.
pub fn fake_chat_model(
    id: &str,
    upstream: &str,
    fallbacks: Vec<String>,
) -> unigen_core::config::ModelEntry {
    use unigen_core::domain::ModelCategory;
    use unigen_core::domain::ModelTier;
    unigen_core::config::ModelEntry {
        id: id.into(),
        category: ModelCategory::Chat,
        tier: ModelTier::Standard,
        adapter: "openai".into(),
        owned_by: "acme".into(),
        capabilities: vec!["chat".into()],
        credits_per_unit: 2,
        completion_credits_per_unit: Some(6),
        max_duration_seconds: None,
        languages: None,
        vision: false,
        default: false,
        upstream: Some(upstream.into()),
        upstream_model: Some("gpt-upstream".into()),
        fallback_upstreams: fallbacks,
        aliases: Vec::new(),
        developer_as_system: false,
        max_output_tokens: None,
        upstream_weights: Default::default(),
        voices: Default::default(),
        description: None,
    }
}
