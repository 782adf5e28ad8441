use std::time::Duration;

use actix_web::{HttpResponse, get, web};
use serde_json::json;

use crate::state::AppState;

/// Liveness: the process answers.
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// Readiness: PostgreSQL and RabbitMQ reachable, job listener connected.
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let database = async {
        let mut conn = state.pool.get().await.ok()?;
        use diesel_async::RunQueryDsl;
        diesel::sql_query("SELECT 1").execute(&mut conn).await.ok()
    };
    let database = tokio::time::timeout(Duration::from_secs(2), database)
        .await
        .ok()
        .flatten()
        .is_some();
    let broker = tokio::time::timeout(Duration::from_secs(2), state.publisher.ensure_connected())
        .await
        .is_ok_and(|r| r.is_ok());
    let listener = state.hub.is_connected();
    let ready = database && broker && listener;
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "checks": { "postgres": database, "rabbitmq": broker, "listener": listener },
    });
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Prometheus text format.
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    state.metrics.refresh(&state.hub, &state.pool).await;
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}
