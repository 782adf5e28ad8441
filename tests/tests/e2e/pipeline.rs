//! The pipeline's guarantees: nothing accepted is lost.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use serde_json::json;
use unigen_jobs::queue::Topology;
use unigen_tests::{TestApp, TestOptions, json_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_runs_on_quorum_queues() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.rabbitmq.queue_type = "quorum".into()),
    )
    .await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "quorum", "size": "512x512"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The broker really made it a quorum queue: the same arguments redeclare
    // fine, and differ only in the type from a classic declaration that fails.
    let topology = Topology::new(&app.settings.rabbitmq);
    let connection = unigen_jobs::queue::connect(&app.settings.rabbitmq.url, "test")
        .await
        .unwrap();
    let declare = |queue_type: &'static str| {
        let (connection, topology) = (&connection, &topology);
        async move {
            let channel = connection.create_channel().await.unwrap();
            let mut arguments = topology.job_queue_arguments("image");
            arguments.insert(
                "x-queue-type".into(),
                lapin::types::AMQPValue::LongString(queue_type.into()),
            );
            let options = QueueDeclareOptions {
                durable: true,
                ..Default::default()
            };
            channel
                .queue_declare(topology.queue("image").into(), options, arguments)
                .await
        }
    };
    assert!(declare("quorum").await.is_ok());
    assert!(
        declare("classic").await.is_err(),
        "it is not a classic queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_accepted_while_the_broker_is_unreachable_are_published_by_the_relay() {
    // The API's broker address is dead; worker and scheduler reach the broker.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .configure_api(|s| s.rabbitmq.url = "amqp://guest:guest@127.0.0.1:1/%2f".into()),
    )
    .await;
    let (status, created) = json_of(
        app.post_json(
            "/api/v1/images/generations?async=true",
            &app.key,
            &json!({"prompt": "relayed"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        status, 202,
        "accepted although the broker is unreachable: {created}"
    );
    let job = app
        .wait_for_job(created["id"].as_str().unwrap(), Duration::from_secs(30))
        .await;
    assert_eq!(job["status"], "completed", "{job}");
    let unpublished = app
        .db
        .scalar_i64("SELECT count(*) FROM jobs WHERE enqueued_at IS NULL")
        .await;
    assert_eq!(unpublished, 0);

    // A sync request waits through the relay's delay too.
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "sync relayed"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_vanished_is_rescued_after_its_lease_and_completed() {
    let app = TestApp::spawn().await;
    let id = app.submit_image_async(&json!({"prompt": "orphan"})).await;
    app.wait_for_job(&id, Duration::from_secs(30)).await;
    // Simulate a worker that claimed a job and died: processing, lease expired.
    let client = app.db.client().await;
    let orphan = uuid::Uuid::now_v7();
    client
        .execute(
            "INSERT INTO jobs (id, org_id, api_key_id, tool, status, model, model_tier, input_params, \
             estimated_credits, attempt, enqueued_at, worker_id, lease_expires_at, started_at) \
             SELECT $1, org_id, api_key_id, tool, 'processing', model, model_tier, input_params, \
             estimated_credits, 1, now(), 'dead-worker', now() - interval '1 second', now() \
             FROM jobs WHERE id = $2",
            &[&orphan, &id.parse::<uuid::Uuid>().unwrap()],
        )
        .await
        .unwrap();
    let job = app
        .wait_for_job(&orphan.to_string(), Duration::from_secs(30))
        .await;
    assert_eq!(job["status"], "completed", "{job}");
    let attempt = app.attempt_of(&orphan.to_string()).await;
    assert_eq!(attempt, 2, "the rescue counted one more attempt");
    let events = app.events().await;
    let announced: Vec<&str> = events
        .iter()
        .filter(|(_, data)| data["jobId"] == orphan.to_string().as_str())
        .map(|(kind, _)| kind.as_str())
        .collect();
    assert_eq!(
        announced,
        ["generation.completed"],
        "a retried attempt is the same generation: no second start"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_lost_its_worker_too_often_fails_with_a_reason() {
    let app =
        TestApp::spawn_with(TestOptions::default().configure(|s| s.jobs.max_attempts = 2)).await;
    let id = app.submit_image_async(&json!({"prompt": "cursed"})).await;
    app.wait_for_job(&id, Duration::from_secs(30)).await;
    let client = app.db.client().await;
    let id: uuid::Uuid = id.parse().unwrap();
    client
        .execute(
            "UPDATE jobs SET status = 'processing', attempt = 2, output_data = NULL, completed_at = NULL, \
             actual_credits = NULL, lease_expires_at = now() - interval '1 second' WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let job = app
        .wait_for_job(&id.to_string(), Duration::from_secs(30))
        .await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(
        job["errorMessage"],
        "the job was interrupted 2 times (worker lost); giving up"
    );
    assert_eq!(job["actualCredits"], 0);
    let (kind, data) = app.events().await.pop().expect("an event");
    assert_eq!(kind, "generation.failed", "the give-up is reported");
    assert_eq!(
        data["errorMessage"],
        "the job was interrupted 2 times (worker lost); giving up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_unreadable_messages_do_not_run_jobs_twice_or_block_the_queue() {
    // No scheduler: it would take the dead letters off their queue (and fail
    // their jobs, see recovery::a_job_whose_message_was_dead_lettered_...).
    let app = TestApp::spawn_with(TestOptions::default().without_scheduler()).await;
    let id = app.submit_image_async(&json!({"prompt": "once"})).await;
    app.wait_for_job(&id, Duration::from_secs(30)).await;

    // A duplicate of a finished job, a message for no job, and garbage.
    let broker = app.raw_publisher().await;
    broker.publish_job("image", &id).await;
    broker
        .publish_job("image", &uuid::Uuid::now_v7().to_string())
        .await;
    broker.publish("image", b"{not json").await;

    // The queue keeps flowing: a new job still completes.
    let next = app
        .submit_image_async(&json!({"prompt": "after the poison"}))
        .await;
    assert_eq!(
        app.wait_for_job(&next, Duration::from_secs(30)).await["status"],
        "completed"
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut count = broker.dead_letters("image").await;
    while count < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        count = broker.dead_letters("image").await;
    }
    assert_eq!(
        count, 2,
        "the ghost and the garbage went to the dead-letter queue"
    );
    let job = app.job(&id).await;
    assert_eq!(job["status"], "completed");
    let attempt = app.attempt_of(&id).await;
    assert_eq!(
        attempt, 1,
        "the duplicate message did not run the job again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_hands_back_unfinished_jobs_and_another_worker_completes_them() {
    let mut app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.local_provider.latency_ms = 4_000;
        s.worker.grace_seconds = 0;
    }))
    .await;
    let id = app
        .submit_image_async(&json!({"prompt": "handed over"}))
        .await;
    app.wait_for_status(&id, "processing", Duration::from_secs(20))
        .await;
    app.stop_worker();
    app.wait_for_status(&id, "pending", Duration::from_secs(20))
        .await;
    let _second = app.spawn_worker(|s| s.local_provider.latency_ms = 0);
    let job = app.wait_for_job(&id, Duration::from_secs(30)).await;
    assert_eq!(job["status"], "completed", "{job}");
    let attempt = app.attempt_of(&id).await;
    assert_eq!(
        attempt, 1,
        "a graceful hand-back does not count as an attempt"
    );
}

/// A worker that stops right after its claim hands the job back (pending,
/// unpublished) while the submitter's publish confirm may still be on its
/// way: that late confirm must not mark the job published, or no message
/// would ever bring it to a worker again. The relay's own publish marks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_publish_confirm_leaves_a_handed_back_job_to_the_relay() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id: uuid::Uuid = app
        .submit_image_async(&json!({"prompt": "confirmed late"}))
        .await
        .parse()
        .unwrap();
    // As `queries::jobs::release` leaves it: pending again after it started.
    app.db
        .client()
        .await
        .execute(
            "UPDATE jobs SET started_at = now(), enqueued_at = NULL WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let mut conn = app.db.connect().await;
    let confirmed = unigen_db::queries::jobs::mark_enqueued(&mut conn, &[id])
        .await
        .unwrap();
    assert_eq!(confirmed, 0, "the late confirm marks nothing");
    let republished = unigen_db::queries::jobs::mark_republished(&mut conn, &[id])
        .await
        .unwrap();
    assert_eq!(republished, 1, "the relay's publish marks it");
}
