//! The soak's webhook receiver: records the event id of every delivery it
//! accepts, and fails the first attempt of about a quarter of the events
//! (those whose id ends in 0-3) with a 500, so the scheduler's retries are
//! part of the run. A later attempt of the same event always succeeds, so
//! every event can be delivered within the retry schedule.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[derive(Default)]
struct State {
    /// Event ids answered with a 2xx.
    delivered: HashSet<String>,
    /// Attempts seen per event id.
    attempts: HashMap<String, u32>,
    failures_served: u64,
    unreadable: u64,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<State>>);

impl Respond for Recorder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = self.0.lock().expect("receiver state");
        let Some(id) = serde_json::from_slice::<Value>(&request.body)
            .ok()
            .and_then(|body| body["id"].as_str().map(str::to_owned))
        else {
            state.unreadable += 1;
            return ResponseTemplate::new(400);
        };
        let attempts = state.attempts.entry(id.clone()).or_default();
        *attempts += 1;
        let fails_first = id.ends_with(['0', '1', '2', '3']);
        if fails_first && *attempts == 1 {
            state.failures_served += 1;
            return ResponseTemplate::new(500);
        }
        state.delivered.insert(id);
        ResponseTemplate::new(204)
    }
}

pub(crate) struct Receiver {
    server: MockServer,
    recorder: Recorder,
}

/// What the receiver saw.
pub(crate) struct ReceiverCounts {
    pub delivered: HashSet<String>,
    pub attempts: u64,
    pub failures_served: u64,
    pub unreadable: u64,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        // Nothing kept per request: a 20-minute run sends thousands.
        let server = MockServer::builder()
            .disable_request_recording()
            .start()
            .await;
        let recorder = Recorder::default();
        Mock::given(method("POST"))
            .respond_with(recorder.clone())
            .mount(&server)
            .await;
        Receiver { server, recorder }
    }

    pub(crate) fn url(&self) -> String {
        format!("{}/hook", self.server.uri())
    }

    pub(crate) fn counts(&self) -> ReceiverCounts {
        let state = self.recorder.0.lock().expect("receiver state");
        ReceiverCounts {
            delivered: state.delivered.clone(),
            attempts: state.attempts.values().map(|n| u64::from(*n)).sum(),
            failures_served: state.failures_served,
            unreadable: state.unreadable,
        }
    }
}
