//! Metering of chat completions: tokens reserved before the model runs (the
//! completion capped to what the quota has left), settled once with what was
//! said, and the usage object of the answer.

use serde_json::Value;
use unigen_core::config::ModelEntry;
use unigen_db::billing::{Bucket, Refusal, chat_charge, chat_hold, chat_usage_of};
use unigen_providers::chat::ChatParams;

use super::{Charged, SyncReservation};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

const CHAT_ENDPOINT: &str = "/v1/chat/completions";

/// The usage object: token counts, credits, and what the token quota has
/// left (in tokens of this model's tier) after the charge (the rule is
/// [`chat_usage_of`], shared with batch lines).
pub fn usage(prompt_tokens: u32, completion_tokens: u32, settled: Option<&Charged>) -> Value {
    chat_usage_of(
        prompt_tokens,
        completion_tokens,
        settled.map(|s| (s.credits, s.bucket.as_ref())),
    )
}

/// What a completion may cost, reserved before the model runs. Without an
/// explicit `max_tokens`, the completion is capped to what the token quota
/// has left, so a nearly empty bucket still answers briefly instead of 402.
pub async fn reserve_tokens(
    state: &AppState,
    caller: &Caller,
    model: &ModelEntry,
    params: &mut ChatParams,
    prompt_tokens: u32,
) -> Result<ChatMeter, ApiError> {
    reserve_tokens_at(CHAT_ENDPOINT, state, caller, model, params, prompt_tokens).await
}

/// [`reserve_tokens`] for a chat completion served through another
/// protocol's `endpoint` (`/v1/responses`): metered the same way, recorded
/// under that endpoint.
pub async fn reserve_tokens_at(
    endpoint: &'static str,
    state: &AppState,
    caller: &Caller,
    model: &ModelEntry,
    params: &mut ChatParams,
    prompt_tokens: u32,
) -> Result<ChatMeter, ApiError> {
    // Every choice may say `max_tokens`.
    let choices = params.n.max(1);
    let estimate = |per_choice: u32| chat_hold(prompt_tokens, per_choice, choices, model).0;
    let multiplier = Bucket::ChatTokens.multiplier(model.tier);
    let first = SyncReservation::reserve(
        state,
        caller,
        endpoint,
        &model.id,
        &estimate(params.max_tokens),
    )
    .await;
    let reservation = match first {
        Err(ApiError::Quota(Refusal::Quota { bucket, remaining }))
            if !params.max_tokens_explicit && bucket == Bucket::ChatTokens.as_str() =>
        {
            let fits = ((remaining / multiplier).floor() as i64 - i64::from(prompt_tokens))
                / i64::from(choices);
            if fits < 1 {
                return Err(ApiError::Quota(Refusal::Quota { bucket, remaining }));
            }
            params.max_tokens = fits as u32;
            params.max_tokens_capped = true;
            SyncReservation::reserve(
                state,
                caller,
                endpoint,
                &model.id,
                &estimate(params.max_tokens),
            )
            .await?
        }
        other => other?,
    };
    Ok(ChatMeter {
        reservation: Some(reservation),
        model: model.clone(),
        multiplier,
        tools_used: if params.web_search {
            vec!["web_search".to_owned()]
        } else {
            Vec::new()
        },
        prompt_tokens,
        counted: 0,
    })
}

/// Settles a completion's reservation once; a stream dropped before its end
/// (client gone) is charged for what was generated until then.
pub struct ChatMeter {
    reservation: Option<SyncReservation>,
    model: ModelEntry,
    multiplier: f64,
    tools_used: Vec<String>,
    pub prompt_tokens: u32,
    /// Completion tokens counted so far (streams).
    pub counted: u32,
}

impl ChatMeter {
    pub async fn settle(&mut self, prompt: u32, completion: u32) -> Option<Charged> {
        let reservation = self.reservation.take()?;
        let charge = chat_charge(prompt, completion, self.multiplier, &self.model);
        let tokens = (i64::from(prompt), i64::from(completion));
        match reservation
            .settle(&charge, self.multiplier, tokens, self.tools_used.clone())
            .await
        {
            Ok(charged) => Some(charged),
            Err(err) => {
                tracing::error!(error = %err, "recording a chat completion's charge failed; its hold expires with its block");
                None
            }
        }
    }

    pub async fn release(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            reservation.release().await;
        }
    }
}

impl Drop for ChatMeter {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let mut rest = ChatMeter {
            reservation: Some(reservation),
            model: self.model.clone(),
            multiplier: self.multiplier,
            tools_used: std::mem::take(&mut self.tools_used),
            prompt_tokens: self.prompt_tokens,
            counted: self.counted,
        };
        tokio::spawn(async move {
            let (prompt, completion) = (rest.prompt_tokens, rest.counted);
            rest.settle(prompt, completion).await;
        });
    }
}
