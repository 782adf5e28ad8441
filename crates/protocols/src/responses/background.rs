//! Background responses (`background: true`): each runs as a job of the
//! `responses` tool. The response's id is the job's (`resp_` and the job's
//! UUID without dashes), so either finds the other; the job's status is the
//! response's while no answer exists.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::output::{self, Details, Head};

/// A background response's job parameters: the request as created (with
/// `max_output_tokens` capped when the quota could not hold the model's
/// default).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackgroundJob {
    pub request: Map<String, Value>,
}

/// The base of every id the response mints (its own, its items').
pub fn unique_of(job_id: Uuid) -> String {
    job_id.simple().to_string()
}

pub fn response_id(job_id: Uuid) -> String {
    format!("resp_{}", unique_of(job_id))
}

/// The job a response id names, if it has a job's shape (every response id
/// does: one answered in its request is never a job's).
pub fn job_id_of(response_id: &str) -> Option<Uuid> {
    let hex = response_id.strip_prefix("resp_")?;
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::parse_str(hex).ok()
}

/// The response status of a job's status.
pub fn status_of_job(job_status: &str) -> &'static str {
    match job_status {
        "pending" => "queued",
        "processing" => "in_progress",
        "completed" => "completed",
        "cancelled" => "cancelled",
        _ => "failed",
    }
}

/// The response object of a background response without an answer: queued,
/// in progress, cancelled or failed (`error_message` the job's).
pub fn unanswered(
    head: &Head,
    echo: &Map<String, Value>,
    job_status: &str,
    error_message: Option<&str>,
) -> Value {
    let status = status_of_job(job_status);
    let details = Details {
        error: match status {
            "failed" => output::failure(error_message.unwrap_or("the response failed")),
            _ => Value::Null,
        },
        ..Details::default()
    };
    output::response_object(head, echo, status, &[], Value::Null, details)
}

/// An answered background response's `usage` with the credits its job was
/// charged (known only once the job completed).
pub fn with_charge(mut response: Value, job_usage: Option<&Value>) -> Value {
    let Some(credits) = job_usage.and_then(|u| u["credits_used"].as_i64()) else {
        return response;
    };
    if let Some(usage) = response.get_mut("usage").and_then(Value::as_object_mut) {
        usage.insert("credits_used".to_owned(), json!(credits));
        usage.insert("credits_breakdown".to_owned(), json!({ "tokens": credits }));
        if let Some(multiplier) = job_usage.and_then(|u| u.get("quota_multiplier")) {
            usage.insert("quota_multiplier".to_owned(), multiplier.clone());
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Head {
        Head {
            id: "resp_1".into(),
            created_at: 10,
            model: "local/echo".into(),
        }
    }

    #[test]
    fn a_response_id_names_its_job_and_back() {
        let job = Uuid::now_v7();
        let id = response_id(job);
        assert_eq!(job_id_of(&id), Some(job));
        assert_eq!(id.len(), "resp_".len() + 32);
    }

    #[test]
    fn ids_not_shaped_like_a_job_name_none() {
        for id in [
            "resp_",
            "resp_abc",
            "msg_0123456789abcdef0123456789abcdef",
            "resp_0123456789abcdef0123456789abcdeg",
            "resp_0123456789abcdef0123456789abcdef0",
            "resp_01234567-89ab-cdef-0123-456789abcdef",
        ] {
            assert_eq!(job_id_of(id), None, "{id}");
        }
    }

    #[test]
    fn job_statuses_are_response_statuses() {
        assert_eq!(status_of_job("pending"), "queued");
        assert_eq!(status_of_job("processing"), "in_progress");
        assert_eq!(status_of_job("completed"), "completed");
        assert_eq!(status_of_job("cancelled"), "cancelled");
        assert_eq!(status_of_job("failed"), "failed");
    }

    #[test]
    fn an_unanswered_response_has_no_output_and_says_why_it_failed() {
        let echo: Map<String, Value> = json!({"background": true, "metadata": {"a": "b"}})
            .as_object()
            .cloned()
            .unwrap();
        let queued = unanswered(&head(), &echo, "pending", None);
        assert_eq!(queued["status"], "queued");
        assert_eq!(queued["output"], json!([]));
        assert_eq!(queued["usage"], Value::Null);
        assert_eq!(queued["error"], Value::Null);
        assert_eq!(queued["background"], true);
        assert_eq!(queued["metadata"]["a"], "b");
        let failed = unanswered(&head(), &echo, "failed", Some("the model provider failed"));
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], "server_error");
        assert_eq!(failed["error"]["message"], "the model provider failed");
        let cancelled = unanswered(&head(), &echo, "cancelled", Some("cancelled"));
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(cancelled["error"], Value::Null);
    }

    #[test]
    fn the_charge_is_added_to_an_answers_usage_once_known() {
        let response = json!({"usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7, "credits_used": 0}});
        let charged = with_charge(
            response.clone(),
            Some(&json!({"credits_used": 2, "quota_multiplier": 1.5})),
        );
        assert_eq!(charged["usage"]["credits_used"], 2);
        assert_eq!(charged["usage"]["credits_breakdown"]["tokens"], 2);
        assert_eq!(charged["usage"]["quota_multiplier"], 1.5);
        assert_eq!(charged["usage"]["total_tokens"], 7);
        assert_eq!(with_charge(response.clone(), None), response);
    }
}
