//! Fault injection: processes killed for real (SIGKILL of `unigen-stack`
//! processes) and connections to PostgreSQL and RabbitMQ cut through a TCP
//! proxy (the machine's services keep running). After each scenario every
//! accepted job has ended exactly once in a terminal state, the credits
//! balance, and each completion was delivered to the webhook receiver.
//! Each scenario prints its figures (jobs, retried, recovery time): run with
//! `--no-capture` to see them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;
use unigen_tests::{FaultProxy, TestApp, TestOptions, json_of};
use uuid::Uuid;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const STACK: &str = env!("CARGO_BIN_EXE_unigen-stack");
const SETTLE: Duration = Duration::from_secs(90);

/// The load of these tests is far above a plan's request rate.
async fn lift_plan_limits(app: &TestApp) {
    app.sql("UPDATE plans SET rate_limit_per_minute = 1000000, concurrent_requests = 10000")
        .await;
}

/// A receiver subscribed to `generation.completed`, answering 200 after `delay`.
async fn completion_receiver(app: &TestApp, delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(delay))
        .mount(&server)
        .await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/webhooks",
            &app.key,
            &json!({"name": "faults", "url": format!("{}/hook", server.uri()),
                    "events": ["generation.completed"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    server
}

async fn submit(app: &TestApp, prompt: &str) -> String {
    app.submit_image_async(&json!({"prompt": prompt, "size": "512x512"}))
        .await
}

/// `(status, attempt)` of each job, read straight from PostgreSQL.
async fn job_states(app: &TestApp, ids: &[String]) -> HashMap<String, (String, i32)> {
    let ids: Vec<Uuid> = ids.iter().map(|id| id.parse().unwrap()).collect();
    let rows = app
        .db
        .client()
        .await
        .query(
            "SELECT id::text, status, attempt FROM jobs WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect()
}

async fn count_in_status(app: &TestApp, ids: &[String], status: &str) -> usize {
    job_states(app, ids)
        .await
        .values()
        .filter(|(s, _)| s == status)
        .count()
}

/// Waits until `check` holds, or fails naming `what`.
async fn until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_all_terminal(app: &TestApp, ids: &[String]) {
    until("every job to end", SETTLE, || async {
        job_states(app, ids)
            .await
            .values()
            .all(|(s, _)| matches!(s.as_str(), "completed" | "failed" | "cancelled"))
    })
    .await;
}

#[derive(Debug, Default)]
struct Outcome {
    completed: usize,
    failed: usize,
    cancelled: usize,
    /// Jobs claimed more than once (their first worker was lost).
    retried: usize,
    /// Webhook requests beyond the first for the same event (at-least-once
    /// delivery: only an attempt cut off mid-flight repeats).
    duplicate_deliveries: usize,
}

/// The promise: every accepted job ended exactly once (one terminal state,
/// one completion or failure event, one charge for a completion and none
/// otherwise, nothing left reserved), the ledger balances, and the receiver
/// got every completion.
async fn assert_each_job_ended_once(
    app: &TestApp,
    ids: &[String],
    receiver: &MockServer,
) -> Outcome {
    wait_all_terminal(app, ids).await;
    let states = job_states(app, ids).await;
    assert_eq!(states.len(), ids.len(), "every accepted job exists");
    let client = app.db.client().await;

    let mut events: HashMap<(String, String), i64> = HashMap::new();
    for row in client
        .query(
            "SELECT data->>'jobId', type, count(*) FROM events \
             WHERE type LIKE 'generation.%' GROUP BY 1, 2",
            &[],
        )
        .await
        .unwrap()
    {
        events.insert((row.get(0), row.get(1)), row.get(2));
    }
    let mut charges: HashMap<String, i64> = HashMap::new();
    for row in client
        .query(
            "SELECT metadata->>'request_id', count(*) FROM credit_transactions \
             WHERE type = 'consumption' GROUP BY 1",
            &[],
        )
        .await
        .unwrap()
    {
        charges.insert(row.get(0), row.get(1));
    }
    let mut outcome = Outcome::default();
    for (id, (status, attempt)) in &states {
        let count = |kind: &str| {
            events
                .get(&(id.clone(), format!("generation.{kind}")))
                .copied()
                .unwrap_or(0)
        };
        let charged = charges.get(id).copied().unwrap_or(0);
        let expected = match status.as_str() {
            "completed" => {
                outcome.completed += 1;
                (1, 0, 1)
            }
            "failed" => {
                outcome.failed += 1;
                (0, 1, 0)
            }
            "cancelled" => {
                outcome.cancelled += 1;
                (0, 0, 0)
            }
            other => panic!("job {id} ended {other}"),
        };
        assert_eq!(
            (count("completed"), count("failed"), charged),
            expected,
            "job {id} ({status}): completion events, failure events, charges"
        );
        assert!(count("started") <= 1, "job {id} announced once");
        if *attempt > 1 {
            outcome.retried += 1;
        }
    }

    // Nothing stays reserved, and the ledger adds up to the balances.
    let reserved: i64 = client
        .query_one("SELECT count(*) FROM reservations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(reserved, 0, "reservations left behind");
    let row = client
        .query_one(
            "SELECT a.included_remaining + a.purchased_balance - a.overage_credits, \
                    a.reserved_credits, \
                    (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM credit_transactions t \
                      WHERE t.org_id = a.org_id) \
               FROM billing_accounts a WHERE a.org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap();
    let (balance, reserved_credits, ledger): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(reserved_credits, 0, "credits left reserved");
    assert_eq!(ledger, balance, "the ledger's sum equals the balance");

    // Every completion reached the receiver.
    until(
        "every completion webhook to be delivered",
        SETTLE,
        || async {
            client
                .query_one(
                    "SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.id = d.event_id \
                 WHERE e.type = 'generation.completed' AND d.status <> 'succeeded'",
                    &[],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 0
        },
    )
    .await;
    let mut received: HashMap<String, usize> = HashMap::new();
    for request in receiver.received_requests().await.unwrap() {
        let envelope: Value = serde_json::from_slice(&request.body).unwrap();
        *received
            .entry(envelope["data"]["jobId"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for (id, (status, _)) in &states {
        let expected = usize::from(status == "completed");
        let got = received.get(id).copied().unwrap_or(0);
        assert!(
            got >= expected && (expected == 1 || got == 0),
            "job {id} ({status}) reached the receiver {got} times"
        );
        outcome.duplicate_deliveries += got.saturating_sub(1);
    }
    outcome
}

fn report(scenario: &str, outcome: &Outcome, figures: &[(&str, String)]) {
    let figures: Vec<String> = figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "FAULTS {scenario}: completed={} failed={} cancelled={} retried={} duplicate_deliveries={} {}",
        outcome.completed,
        outcome.failed,
        outcome.cancelled,
        outcome.retried,
        outcome.duplicate_deliveries,
        figures.join(" ")
    );
}

fn ms(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

/// (1) A worker process killed with SIGKILL in the middle of 50 jobs: the
/// jobs it held lose their lease, the scheduler re-queues them, and another
/// worker completes them, each charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_batch_loses_nothing_and_charges_once() {
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.jobs.lease_seconds = 3;
        s.local_provider.latency_ms = 300;
        s.worker.tools = vec!["image".into()];
    }))
    .await;
    lift_plan_limits(&app).await;
    let receiver = completion_receiver(&app, Duration::ZERO).await;
    let mut doomed = app.spawn_process(STACK, "worker", |_| {});
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(submit(&app, &format!("batch {i}")).await);
    }
    until("the worker to be mid-batch", SETTLE, || async {
        let states = job_states(&app, &ids).await;
        let done = states.values().filter(|(s, _)| s == "completed").count();
        let running = states.values().filter(|(s, _)| s == "processing").count();
        done >= 8 && running >= 2
    })
    .await;
    let held = count_in_status(&app, &ids, "processing").await;
    doomed.kill().await;
    let killed = Instant::now();
    let _rescuer = app.spawn_worker(|_| {});

    let outcome = assert_each_job_ended_once(&app, &ids, &receiver).await;
    let recovered = killed.elapsed();
    assert_eq!(outcome.completed, 50, "{outcome:?}");
    assert!(
        outcome.retried >= 1,
        "the jobs the killed worker held ran again: {outcome:?}"
    );
    report(
        "worker_sigkill",
        &outcome,
        &[
            ("jobs", "50".into()),
            ("processing_at_kill", held.to_string()),
            ("kill_to_all_settled", ms(recovered)),
        ],
    );
}

/// (2) The broker connection cut for 10 s while 100 async jobs are
/// submitted: every submission is still accepted (the job is in PostgreSQL),
/// the relay publishes what the broker never confirmed, the worker
/// reconnects by itself, and every job completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_during_submission_loses_no_accepted_job() {
    let broker = Arc::new(FaultProxy::rabbitmq().await);
    let proxy = broker.clone();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.rabbitmq.url = proxy.url_via(&s.rabbitmq.url);
        s.worker.tools = vec!["image".into()];
    }))
    .await;
    lift_plan_limits(&app).await;
    let receiver = completion_receiver(&app, Duration::ZERO).await;

    let mut ids = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut cut_at = None;
    let mut readiness_during_cut = None;
    let mut restored = None;
    for i in 0..100 {
        if i == 20 {
            broker.cut();
            cut_at = Some(Instant::now());
        }
        if let Some(at) = cut_at
            && restored.is_none()
            && at.elapsed() >= Duration::from_secs(10)
        {
            broker.restore();
            restored = Some(Instant::now());
        }
        let started = Instant::now();
        ids.push(submit(&app, &format!("outage {i}")).await);
        slowest = slowest.max(started.elapsed());
        // Once the stack has noticed the cut (well before it ends).
        if readiness_during_cut.is_none()
            && restored.is_none()
            && cut_at.is_some_and(|at| at.elapsed() >= Duration::from_secs(2))
        {
            let response = app.client.get(app.url("/readyz")).send().await.unwrap();
            let (status, body) = json_of(response).await;
            readiness_during_cut = Some((status, body["checks"]["rabbitmq"].clone()));
        }
        // 100 submissions over about 15 s: the 10 s cut falls in the middle.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let restored = restored.expect("the broker was restored during the submissions");
    let outage = restored - cut_at.expect("the broker was cut");
    assert_eq!(
        readiness_during_cut,
        Some((503, json!(false))),
        "/readyz reports the broker down during the cut"
    );

    let outcome = assert_each_job_ended_once(&app, &ids, &receiver).await;
    assert_eq!(outcome.completed, 100, "{outcome:?}");
    let relayed = app
        .db
        .scalar_i64(
            "SELECT count(*) FROM jobs WHERE enqueued_at > created_at + interval '1 second'",
        )
        .await;
    assert!(
        relayed > 0,
        "jobs accepted during the cut went through the relay"
    );
    report(
        "broker_cut_10s",
        &outcome,
        &[
            ("jobs", "100".into()),
            ("published_by_relay", relayed.to_string()),
            ("outage", ms(outage)),
            ("slowest_submit", ms(slowest)),
            ("restore_to_all_settled", ms(restored.elapsed())),
        ],
    );
}

/// (3) PostgreSQL unreachable for 5 s while jobs complete and 30 clients
/// long-poll them: the API answers 503 (never 500) to what needs the
/// database, long polls keep waiting and answer once it is back, results a
/// worker could not write are retried, and every job ends once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_while_jobs_complete_and_clients_long_poll_loses_nothing() {
    let postgres = Arc::new(FaultProxy::postgres().await);
    let proxy = postgres.clone();
    let app = Arc::new(
        TestApp::spawn_with(TestOptions::default().configure(move |s| {
            s.database.url = proxy.url_via(&s.database.url);
            s.jobs.lease_seconds = 3;
            s.local_provider.latency_ms = 1_000;
            s.worker.tools = vec!["image".into()];
        }))
        .await,
    );
    lift_plan_limits(&app).await;
    let receiver = completion_receiver(&app, Duration::ZERO).await;
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(submit(&app, &format!("poll {i}")).await);
    }

    // Clients long-poll each job, retrying on 503 as the error asks.
    let statuses_seen = Arc::new(Mutex::new(HashMap::<u16, usize>::new()));
    let mut pollers = Vec::new();
    for id in ids.clone() {
        let (app, seen) = (app.clone(), statuses_seen.clone());
        pollers.push(tokio::spawn(async move {
            loop {
                let response = app
                    .client
                    .get(app.url(&format!("/api/v1/jobs/{id}?poll=true")))
                    .bearer_auth(&app.key)
                    .send()
                    .await
                    .expect("the API answers");
                let status = response.status().as_u16();
                *seen.lock().await.entry(status).or_default() += 1;
                let body: Value = response.json().await.expect("a JSON body");
                match status {
                    200 if matches!(
                        body["status"].as_str(),
                        Some("completed" | "failed" | "cancelled")
                    ) =>
                    {
                        return body["status"].as_str().unwrap().to_owned();
                    }
                    200 => {}
                    503 => {
                        assert_eq!(
                            body["error"]["message"],
                            "the database is unavailable; retry shortly"
                        );
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    other => panic!("long poll answered {other}: {body}"),
                }
            }
        }));
    }
    until("jobs to be running", SETTLE, || async {
        count_in_status(&app, &ids, "completed").await >= 4
    })
    .await;
    postgres.cut();
    // Meanwhile a new request needs the database: a clear 503.
    let (status, body) = json_of(app.get("/api/v1/jobs", &app.key).await).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "service_unavailable");
    let (status, body) = json_of(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, &body["checks"]["postgres"]), (503, &json!(false)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    postgres.restore();
    let restored = Instant::now();

    let mut ended = Vec::new();
    for poller in pollers {
        ended.push(poller.await.expect("poller"));
    }
    let polls_done = restored.elapsed();
    let outcome = assert_each_job_ended_once(&app, &ids, &receiver).await;
    assert_eq!(outcome.completed, 30, "{outcome:?}");
    assert!(ended.iter().all(|s| s == "completed"), "{ended:?}");
    let seen = statuses_seen.lock().await.clone();
    report(
        "postgres_cut_5s",
        &outcome,
        &[
            ("jobs", "30".into()),
            ("long_poll_answers", format!("{seen:?}")),
            ("restore_to_all_polls_answered", ms(polls_done)),
        ],
    );
}

/// (4) 20 processing jobs cancelled while other work flows: they stay
/// cancelled, consume nothing, and the worker running them aborts at once
/// (it then stops on SIGTERM without waiting out its 30 s grace period,
/// although each cancelled job had a minute of provider work left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_processing_jobs_stop_their_worker_at_once_and_consume_nothing() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.worker.tools = vec!["tts".into()];
    }))
    .await;
    lift_plan_limits(&app).await;
    let receiver = completion_receiver(&app, Duration::ZERO).await;
    let mut slow_worker = app.spawn_process(STACK, "worker", |s| {
        s.worker.tools = vec!["image".into()];
        s.worker.concurrency = 20;
        s.worker.grace_seconds = 30;
        s.local_provider.latency_ms = 60_000;
    });
    let mut doomed = Vec::new();
    for i in 0..20 {
        doomed.push(submit(&app, &format!("cancel me {i}")).await);
    }
    until("20 jobs processing", SETTLE, || async {
        count_in_status(&app, &doomed, "processing").await == 20
    })
    .await;

    // Load on another queue, then the cancellations in the middle of it.
    let mut load = Vec::new();
    for i in 0..10 {
        let response = app
            .post_json(
                "/api/v1/audio/speech?async=true",
                &app.key,
                &json!({"input": format!("Load number {i}."), "response_format": "wav"}),
            )
            .await;
        let (status, body) = json_of(response).await;
        assert_eq!(status, 202, "{body}");
        load.push(body["id"].as_str().unwrap().to_owned());
    }
    for id in &doomed {
        let (status, body) =
            json_of(app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
        assert_eq!((status, body), (200, json!({"success": true})));
    }
    let cancelled = Instant::now();
    let exit = slow_worker.terminate(Duration::from_secs(10)).await;
    let stopped = cancelled.elapsed();
    assert!(exit.success(), "{exit:?}");

    let mut all = doomed.clone();
    all.extend(load.iter().cloned());
    let outcome = assert_each_job_ended_once(&app, &all, &receiver).await;
    assert_eq!(
        (outcome.cancelled, outcome.completed),
        (20, 10),
        "{outcome:?}"
    );
    report(
        "cancel_processing",
        &outcome,
        &[
            ("cancelled_processing", "20".into()),
            ("load_jobs", "10".into()),
            ("last_cancel_to_worker_stopped", ms(stopped)),
        ],
    );
}

/// (5) Every message delivered three times (before, during and after the
/// job runs): each job is claimed once and ends once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_deliveries_of_the_same_message_run_each_job_once() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.local_provider.latency_ms = 200;
        s.worker.tools = vec!["image".into()];
    }))
    .await;
    lift_plan_limits(&app).await;
    let receiver = completion_receiver(&app, Duration::ZERO).await;
    let broker = app.raw_publisher().await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let id = submit(&app, &format!("twice {i}")).await;
        broker.publish_job("image", &id).await;
        ids.push(id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in &ids {
        broker.publish_job("image", id).await;
    }
    let outcome = assert_each_job_ended_once(&app, &ids, &receiver).await;
    for id in &ids {
        broker.publish_job("image", id).await;
    }
    // The late duplicates find finished jobs and are dropped.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let outcome_after = assert_each_job_ended_once(&app, &ids, &receiver).await;
    assert_eq!(outcome.completed, 30, "{outcome:?}");
    assert_eq!(
        (outcome_after.retried, outcome_after.duplicate_deliveries),
        (0, 0),
        "no job was claimed or announced twice"
    );
    let attempts = app
        .db
        .scalar_i64("SELECT count(*) FROM jobs WHERE attempt <> 1")
        .await;
    assert_eq!(attempts, 0, "every job claimed exactly once");
    report(
        "duplicate_messages",
        &outcome_after,
        &[("jobs", "30".into()), ("messages", "120".into())],
    );
}

/// (6) The scheduler process killed with SIGKILL while it delivers
/// webhooks: another scheduler takes over the deliveries whose attempts
/// were cut off once their lease runs out; every event is delivered, and
/// only attempts in flight at the kill are repeated (receivers dedupe by
/// event id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_during_webhook_delivery_leaves_every_event_delivered() {
    let app = TestApp::spawn_with(TestOptions::default().without_scheduler().configure(|s| {
        s.worker.tools = vec!["image".into()];
        s.webhooks.timeout_ms = 3_000;
        s.webhooks.lease_margin_ms = 500;
        s.webhooks.concurrency = 8;
    }))
    .await;
    lift_plan_limits(&app).await;
    let receiver = completion_receiver(&app, Duration::from_millis(1_500)).await;
    let mut doomed = app.spawn_process(STACK, "scheduler", |_| {});
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(submit(&app, &format!("deliver {i}")).await);
    }
    until("deliveries in flight", SETTLE, || async {
        receiver.received_requests().await.unwrap_or_default().len() >= 4
    })
    .await;
    doomed.kill().await;
    let killed = Instant::now();
    let in_flight = app
        .db
        .scalar_i64(
            "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND attempts > 0",
        )
        .await;
    let _successor = app.spawn_process(STACK, "scheduler", |_| {});

    let outcome = assert_each_job_ended_once(&app, &ids, &receiver).await;
    let recovered = killed.elapsed();
    assert_eq!(outcome.completed, 30, "{outcome:?}");
    assert!(
        outcome.duplicate_deliveries as i64 <= in_flight,
        "only attempts cut off by the kill repeat: {outcome:?}, {in_flight} in flight"
    );
    report(
        "scheduler_sigkill_webhooks",
        &outcome,
        &[
            ("jobs", "30".into()),
            ("attempts_in_flight_at_kill", in_flight.to_string()),
            ("kill_to_all_delivered", ms(recovered)),
        ],
    );
}

/// A broker that stops answering while its connection stays open: every
/// publish gives up within its timeout, and a later one goes through on a
/// new connection. The old connection's close, which such a broker never
/// answers, once held the publisher's lock: every publish after it hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_stops_answering_fails_publishes_within_their_timeout_then_recovers() {
    use unigen_jobs::queue::{JobMessage, Publisher, Topology};
    let broker = FaultProxy::rabbitmq().await;
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let timeout = Duration::from_secs(1);
    let publisher = Publisher::new(
        &broker.url_via(&app.settings.rabbitmq.url),
        "stall-test",
        Topology::new(&app.settings.rabbitmq),
        timeout,
    );
    let message = || JobMessage {
        job_id: Uuid::now_v7(),
        tool: "image".into(),
        attempt: 1,
    };
    publisher
        .publish(&message())
        .await
        .expect("a first publish");

    broker.stall();
    for _ in 0..2 {
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(10), publisher.publish(&message()))
            .await
            .expect("a publish to a silent broker returns");
        assert!(result.is_err(), "nothing was confirmed");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    // New connections are forwarded: publishing works again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout(Duration::from_secs(10), publisher.publish(&message())).await {
            Ok(Ok(())) => break,
            Ok(Err(_)) | Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("no publish went through after the stall: {other:?}"),
        }
    }
}
