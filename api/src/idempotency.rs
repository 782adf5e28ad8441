//! `Idempotency-Key` on every `POST` (IETF draft-ietf-httpapi-idempotency-key-header):
//! the first request with a key runs and its response is kept 24 hours; a
//! retry with the same key and the same request gets that response again
//! (`Idempotent-Replayed: true`), creating and charging nothing. The same key
//! with another request is a 422; while the first still runs, a 409.
//!
//! A request that ended in an error and created nothing frees its key, so
//! the client may retry it. Handlers report what they created through
//! [`Effects`] (on the [`Caller`]): a job, a started agent run, or a body to
//! keep instead of the one sent (a new API key's value is never stored).

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{CONTENT_TYPE, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use actix_web::{HttpMessage, HttpResponse, web};
use sha2::{Digest, Sha256};
use unigen_db::queries::idempotency::{
    self, Claim, ClaimToken, IdempotencyRecord, Released, StoredResponse,
};
use uuid::Uuid;

use crate::auth::Caller;
use crate::effects::{Effects, EffectsInner};
use crate::error::ApiError;
use crate::keyed_body::{self, BodyPrint};
use crate::known_paths::KnownPaths;
use crate::state::AppState;

pub const HEADER: &str = "Idempotency-Key";
/// Sent on a replayed answer (`Idempotent-Replayed: true`).
const REPLAYED_HEADER: &str = "idempotent-replayed";
/// The draft leaves the length open; 255 fits every UUID or ULID scheme.
pub const MAX_KEY_CHARS: usize = 255;
/// Larger responses (many base64 images) are not kept byte for byte: a
/// generation's retry then gets its job (202), anything else runs again.
const MAX_STORED_BODY: u64 = 16 * 1024 * 1024;
/// The longest a request that created nothing waits for a submission of its
/// claim still on its way before it frees its key.
const CLAIM_SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The key's value: bare (`abc-123`) or an RFC 8941 string (`"abc-123"`).
pub fn parse_key(value: &HeaderValue) -> Result<String, ApiError> {
    let invalid = |message: &str| ApiError::InvalidField {
        param: HEADER.to_owned(),
        message: format!("{HEADER} {message}"),
    };
    let text = value
        .to_str()
        .map_err(|_| invalid("must be printable ASCII"))?
        .trim();
    let key = match text.strip_prefix('"') {
        Some(rest) => {
            let inner = rest
                .strip_suffix('"')
                .ok_or_else(|| invalid("has an unterminated quoted string"))?;
            let mut key = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some(escaped @ ('"' | '\\')) => key.push(escaped),
                        _ => return Err(invalid("has an invalid escape in its quoted string")),
                    },
                    '"' => return Err(invalid("has an unescaped quote in its quoted string")),
                    c => key.push(c),
                }
            }
            key
        }
        None => text.to_owned(),
    };
    if key.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if key.chars().count() > MAX_KEY_CHARS {
        return Err(invalid(&format!(
            "must be at most {MAX_KEY_CHARS} characters"
        )));
    }
    if !key.chars().all(|c| (' '..='~').contains(&c)) {
        return Err(invalid("must be printable ASCII"));
    }
    Ok(key)
}

/// The request's identity: API key, method, path, query, media type and
/// body. JSON bodies count by content (key order and spacing aside), and a
/// multipart body without its random boundary, so a client library's retry
/// of the same fields is the same request.
pub fn fingerprint(
    api_key_id: Uuid,
    method: &Method,
    path: &str,
    query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> [u8; 32] {
    let mut print = BodyPrint::new(api_key_id, method, path, query, content_type);
    let json = content_type
        .and_then(|ct| ct.parse::<actix_web::mime::Mime>().ok())
        .is_some_and(|m| m.essence_str().eq_ignore_ascii_case("application/json"));
    if json && let Some(digest) = canonical_json_digest(body) {
        return print.finish_with_digest(digest);
    }
    print.update(body);
    print.finish()
}

/// A digest of a JSON text by content: key order and spacing aside. It
/// streams through the text into one hash, so its memory is one hash state
/// per nesting level (at most serde_json's 128), whatever the body's size:
/// building a `serde_json::Value` cost about 20 bytes of heap per byte of
/// `[0,0,...]`. Scalars and arrays are written into the hash in order, each
/// tagged; an object's members are hashed one by one and summed, an
/// order-free combination. `None` if the text is not JSON.
fn canonical_json_digest(body: &[u8]) -> Option<[u8; 32]> {
    use serde::de::DeserializeSeed;
    let mut hash = Sha256::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    CanonicalJson(&mut hash).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(hash.finalize().into())
}

/// Writes one JSON value's canonical form into its hash.
struct CanonicalJson<'a>(&'a mut Sha256);

impl<'de> serde::de::DeserializeSeed<'de> for CanonicalJson<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CanonicalJson<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.update(b"z");
        Ok(())
    }

    fn visit_bool<E>(self, value: bool) -> Result<(), E> {
        self.0.update(if value { b"t" } else { b"f" });
        Ok(())
    }

    fn visit_i64<E>(self, value: i64) -> Result<(), E> {
        self.0.update(b"i");
        self.0.update(i128::from(value).to_le_bytes());
        Ok(())
    }

    fn visit_u64<E>(self, value: u64) -> Result<(), E> {
        self.0.update(b"i");
        self.0.update(i128::from(value).to_le_bytes());
        Ok(())
    }

    fn visit_f64<E>(self, value: f64) -> Result<(), E> {
        self.0.update(b"d");
        self.0.update(value.to_bits().to_le_bytes());
        Ok(())
    }

    fn visit_str<E>(self, value: &str) -> Result<(), E> {
        self.0.update(b"s");
        self.0.update((value.len() as u64).to_le_bytes());
        self.0.update(value.as_bytes());
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.update(b"[");
        while seq
            .next_element_seed(CanonicalJson(&mut *self.0))?
            .is_some()
        {}
        self.0.update(b"]");
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Lane-wise wrapping sums of the members' own digests: the same
        // members in any order give the same sum.
        let mut sum = [0u64; 4];
        let mut count = 0u64;
        let mut member = Sha256::new();
        while map.next_key_seed(CanonicalJson(&mut member))?.is_some() {
            map.next_value_seed(CanonicalJson(&mut member))?;
            let digest: [u8; 32] = std::mem::take(&mut member).finalize().into();
            for (lane, bytes) in sum.iter_mut().zip(digest.chunks_exact(8)) {
                let mut word = [0u8; 8];
                word.copy_from_slice(bytes);
                *lane = lane.wrapping_add(u64::from_le_bytes(word));
            }
            count += 1;
        }
        self.0.update(b"{");
        self.0.update(count.to_le_bytes());
        for lane in sum {
            self.0.update(lane.to_le_bytes());
        }
        self.0.update(b"}");
        Ok(())
    }
}

/// Every `POST` of `/api/v1` but those whose errors have another shape:
/// the legacy interface (envelopes; its clients predate the header) and
/// Anthropic's Messages API (Anthropic's error body; its API has no such
/// header, as at the root `/v1`).
pub fn applies_to(path: &str) -> bool {
    !path.starts_with("/api/v1/ai-image/") && !path.starts_with("/api/v1/messages")
}

/// The middleware: every `POST` of `/api/v1` with an `Idempotency-Key`.
pub async fn idempotency(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if req.method() != Method::POST || !applies_to(req.path()) {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let mut values = req.headers().get_all(HEADER);
    let Some(value) = values.next() else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    if values.next().is_some() {
        return Ok(req.error_response(ApiError::InvalidField {
            param: HEADER.to_owned(),
            message: format!("send one {HEADER} header, not several"),
        }));
    }
    let key = match parse_key(value) {
        Ok(key) => key,
        Err(err) => return Ok(req.error_response(err)),
    };
    // Boxed: the keyed path's state (claim, replay, record) is kilobytes,
    // which every request passing through (10,000 parked long polls) would
    // otherwise reserve for as long as it runs.
    Box::pin(keyed(req, next, key)).await
}

/// A POST that carries a well-formed key.
async fn keyed(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
    key: String,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // A path no route takes (a 404 or 405) is answered without a byte of
    // its body read.
    let Some((scopes, limit, spooled)) = route_of(&req) else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    // Authenticated once: the handler's extractor reuses this caller. A
    // refused key goes on to the handler, which answers in its own format
    // (the legacy routes' envelope).
    let Ok(mut caller) = req.extract::<Caller>().await else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    // The route's own checks that come before its body: its scope, then its
    // size limit, both before anything is read.
    if !scopes.is_empty()
        && let Err(err) = caller.require_any(&scopes)
    {
        return Ok(req.error_response(err));
    }
    req.extensions_mut().insert(caller.clone());
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let print = if spooled {
        let mut print = BodyPrint::new(
            caller.key_id,
            req.method(),
            req.path(),
            req.query_string(),
            content_type.as_deref(),
        );
        if let Err(err) = keyed_body::spool(&mut req, limit, &mut print).await {
            return Ok(req.error_response(err));
        }
        print.finish()
    } else {
        let body = match read_body(&mut req, limit).await {
            Ok(body) => body,
            Err(err) => return Ok(req.error_response(err)),
        };
        let print = fingerprint(
            caller.key_id,
            req.method(),
            req.path(),
            req.query_string(),
            content_type.as_deref(),
            &body,
        );
        req.set_payload(Payload::from(body));
        print
    };
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Ok(req.error_response(ApiError::internal(anyhow::anyhow!("state missing"))));
    };
    let claim = async {
        let mut conn = state.pool.get().await.map_err(unigen_db::DbError::from)?;
        Ok::<_, ApiError>(idempotency::claim(&mut conn, caller.org_id, &key, &print).await?)
    };
    let token = match claim.await {
        Ok(Claim::Claimed(token)) => token,
        Ok(Claim::Taken(record)) => {
            let response = match answer_again(&state, &caller, &key, &print, record).await {
                Ok(response) => response,
                Err(err) => return Ok(req.error_response(err)),
            };
            return Ok(req.into_response(response));
        }
        Err(err) => return Ok(req.error_response(err)),
    };
    // The handler reports what it creates under this claim.
    caller.effects = Effects::recording(token.clone());
    req.extensions_mut().insert(caller.clone());

    let pending = Pending {
        state: state.clone(),
        org_id: caller.org_id,
        claim: Some(token),
        effects: caller.effects.clone(),
        settled: false,
    };
    let response = next.call(req).await;
    pending.settle(response).await
}

/// The scopes a keyed `POST` needs (any one of them), the most its route
/// reads of a body, and whether the body is spooled to a file rather than
/// held (an upload the route streams to storage), or `None` when no route
/// takes it.
fn route_of(req: &ServiceRequest) -> Option<(Vec<unigen_core::domain::Scope>, usize, bool)> {
    let known = req.app_data::<web::Data<KnownPaths>>()?;
    let state = req.app_data::<web::Data<AppState>>()?;
    let route = known.post(req.path())?;
    let limit = if route.template == crate::routes::KNOWLEDGE_UPLOAD_TEMPLATE {
        // The largest any plan allows; the route checks the plan's own.
        crate::routes::KNOWLEDGE_BODY_CEILING
    } else if route.template == crate::routes::FILES_UPLOAD_TEMPLATE {
        // Keyed, an upload is spooled to a file (fingerprinted on the way),
        // never held: at most the file limit.
        usize::try_from(state.limits.max_file_bytes + crate::routes::FILES_MULTIPART_OVERHEAD)
            .unwrap_or(usize::MAX)
    } else {
        state.limits.max_body
    };
    let spooled = route.template == crate::routes::FILES_UPLOAD_TEMPLATE;
    Some((route.scopes.to_vec(), limit, spooled))
}

/// The whole body, to fingerprint and hand on, at most `limit` bytes (the
/// route's own limit): a declared length over it is refused unread, and the
/// buffer is sized once from it.
async fn read_body(req: &mut ServiceRequest, limit: usize) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let declared = keyed_body::declared_length(req, limit)?;
    let mut payload = req.take_payload();
    let mut body = web::BytesMut::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|err| ApiError::BadRequest(format!("the body could not be read: {err}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A kept answer, or why there is none yet.
async fn answer_again(
    state: &AppState,
    caller: &Caller,
    key: &str,
    print: &[u8; 32],
    record: IdempotencyRecord,
) -> Result<HttpResponse, ApiError> {
    if record.fingerprint.as_slice() != print.as_slice() {
        return Err(ApiError::IdempotencyKeyReused);
    }
    if record.state != "completed" {
        return Err(ApiError::IdempotencyKeyInUse);
    }
    if let Some(run_id) = record.agent_run_id {
        let mut response = crate::routes::replay_agent_run(state, caller.org_id, run_id).await?;
        mark_replayed(&mut response);
        return Ok(response);
    }
    // Only now, for a retry it answers, is the kept body read.
    let body = {
        let mut conn = state.pool.get().await.map_err(unigen_db::DbError::from)?;
        match idempotency::stored_body(&mut conn, caller.org_id, key, record.claim_id).await? {
            Some(body) => Some(body),
            // Kept for its job when its request ended unsettled: the job's
            // creation answer, from the job.
            None => match record.job_id {
                Some(job_id) => {
                    unigen_db::queries::jobs::find_for_org(&mut conn, caller.org_id, job_id)
                        .await?
                        .and_then(|job| {
                            serde_json::to_vec(&crate::views::AsyncJobCreated::from(&job)).ok()
                        })
                }
                None => None,
            },
        }
    };
    let status = record
        .status_code
        .and_then(|code| StatusCode::from_u16(u16::try_from(code).ok()?).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = HttpResponse::build(status);
    if let Some(content_type) = record.content_type {
        response.insert_header((CONTENT_TYPE, content_type));
    }
    let mut response = response.body(body.unwrap_or_default());
    mark_replayed(&mut response);
    Ok(response)
}

fn mark_replayed(response: &mut HttpResponse) {
    response.headers_mut().insert(
        actix_web::http::header::HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static("true"),
    );
}

/// A claimed key until its request settles it; dropped unsettled (the
/// client went away mid-request), it settles from what was created.
struct Pending {
    state: web::Data<AppState>,
    org_id: Uuid,
    claim: Option<ClaimToken>,
    effects: Effects,
    settled: bool,
}

impl Pending {
    async fn settle(
        mut self,
        response: Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error>,
    ) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
        self.settled = true;
        let effects = self.effects.take();
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                self.store(fallback(&effects)).await;
                return Err(err);
            }
        };
        if let Some(run_id) = effects.run {
            self.store(Some(Kept::Run(run_id))).await;
            return Ok(response.map_into_boxed_body());
        }
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let streamed = content_type
            .as_deref()
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let keep = status.is_success() || effects.job.is_some();
        let small = matches!(response.response().body().size(), BodySize::Sized(n) if n <= MAX_STORED_BODY)
            || matches!(response.response().body().size(), BodySize::None);
        if !keep || streamed || !small {
            // A stream (chat) is not kept; nor a response too large to keep.
            self.store(fallback(&effects)).await;
            return Ok(response.map_into_boxed_body());
        }
        let (request, response) = response.into_parts();
        let (head, body) = response.into_parts();
        let bytes = match actix_web::body::to_bytes(body).await {
            Ok(bytes) => bytes,
            Err(err) => {
                self.store(fallback(&effects)).await;
                let err: Box<dyn std::error::Error> = err.into();
                return Err(ApiError::internal(anyhow::anyhow!(
                    "response body could not be read: {err}"
                ))
                .into());
            }
        };
        let kept = effects.replay_body.clone().unwrap_or_else(|| bytes.clone());
        self.store(Some(Kept::Response {
            status,
            content_type,
            body: kept,
        }))
        .await;
        let response = head.set_body(bytes).map_into_boxed_body();
        Ok(ServiceResponse::new(request, response))
    }

    /// Completes the record with `kept`, or frees the key without one.
    async fn store(&self, kept: Option<Kept>) {
        let Some(claim) = &self.claim else { return };
        if let Err(err) = settle_record(&self.state, self.org_id, claim, kept).await {
            tracing::error!(error = %err, "idempotency record not settled");
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let kept = fallback(&self.effects.take());
        let Some(claim) = self.claim.take() else {
            return;
        };
        let (state, org_id) = (self.state.clone(), self.org_id);
        runtime.spawn(async move {
            if let Err(err) = settle_record(&state, org_id, &claim, kept).await {
                tracing::error!(error = %err, "idempotency record not settled");
            }
        });
    }
}

enum Kept {
    Response {
        status: StatusCode,
        content_type: Option<String>,
        body: Bytes,
    },
    Run(Uuid),
}

/// What a request that created something answers when its own response
/// is not kept: the job's 202, or the run's stream.
fn fallback(effects: &EffectsInner) -> Option<Kept> {
    if let Some(run_id) = effects.run {
        return Some(Kept::Run(run_id));
    }
    effects.job.clone().map(|body| Kept::Response {
        status: StatusCode::ACCEPTED,
        content_type: Some("application/json".to_owned()),
        body,
    })
}

async fn settle_record(
    state: &AppState,
    org_id: Uuid,
    claim: &ClaimToken,
    kept: Option<Kept>,
) -> Result<(), unigen_db::DbError> {
    if kept.is_none() {
        // A job still on its way under this claim (the request was dropped
        // mid-submission) is written on the claim: wait for it, so the key
        // is kept for that job rather than freed.
        let settled = state.submitter.claim_settled(claim.claim_id);
        if tokio::time::timeout(CLAIM_SETTLE_WAIT, settled)
            .await
            .is_err()
        {
            tracing::warn!("a submission under an idempotency key did not settle in time");
        }
    }
    let mut conn = state.pool.get().await?;
    let held = match kept {
        None => idempotency::release(&mut conn, org_id, claim).await? != Released::NotHeld,
        Some(Kept::Run(run_id)) => {
            idempotency::complete(
                &mut conn,
                org_id,
                claim,
                &StoredResponse {
                    status_code: 200,
                    content_type: Some("text/event-stream"),
                    body: None,
                    agent_run_id: Some(run_id),
                },
            )
            .await?
        }
        Some(Kept::Response {
            status,
            content_type,
            body,
        }) => {
            idempotency::complete(
                &mut conn,
                org_id,
                claim,
                &StoredResponse {
                    status_code: status.as_u16() as i16,
                    content_type: content_type.as_deref(),
                    body: Some(&body),
                    agent_run_id: None,
                },
            )
            .await?
        }
    };
    if !held {
        // Taken over (abandoned for 15 minutes) or settled already: the
        // key's current claim is another request's, and stays as it is.
        tracing::warn!("idempotency key settled by a request that no longer held it");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: &str) -> Result<String, String> {
        parse_key(&HeaderValue::from_str(raw).unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn posts_whose_errors_have_another_shape_take_no_key() {
        assert!(applies_to("/api/v1/chat/completions"));
        assert!(applies_to("/api/v1/responses"));
        assert!(!applies_to("/api/v1/ai-image/generate"));
        assert!(!applies_to("/api/v1/messages"));
        assert!(!applies_to("/api/v1/messages/count_tokens"));
    }

    #[test]
    fn keys_are_read_bare_or_as_structured_field_strings() {
        assert_eq!(key("abc-123").unwrap(), "abc-123");
        assert_eq!(key("\"abc-123\"").unwrap(), "abc-123");
        assert_eq!(key(r#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(key(&"k".repeat(255)).unwrap().len(), 255);
        assert!(key(&"k".repeat(256)).unwrap_err().contains("at most 255"));
        assert!(key("\"\"").unwrap_err().contains("must not be empty"));
        assert!(key("\"abc").unwrap_err().contains("unterminated"));
        assert!(key(r#""a\nb""#).unwrap_err().contains("invalid escape"));
    }

    #[test]
    fn json_bodies_match_by_content_and_multipart_without_the_boundary() {
        let id = Uuid::nil();
        let json = Some("application/json");
        let a = fingerprint(id, &Method::POST, "/x", "", json, br#"{"a":1,"b":[1,2]}"#);
        let b = fingerprint(
            id,
            &Method::POST,
            "/x",
            "",
            json,
            b"{ \"b\": [1, 2], \"a\": 1 }",
        );
        let c = fingerprint(id, &Method::POST, "/x", "", json, br#"{"a":2,"b":[1,2]}"#);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let nested = |body: &str| fingerprint(id, &Method::POST, "/x", "", json, body.as_bytes());
        assert_eq!(
            nested(r#"{"o":{"x":[1,{"p":true,"q":null}],"y":"s"}}"#),
            nested(r#"{ "o": { "y": "s", "x": [1, {"q": null, "p": true}] } }"#)
        );
        assert_ne!(nested(r#"{"x":[1,2]}"#), nested(r#"{"x":[2,1]}"#));
        assert_ne!(nested(r#"{"n":1}"#), nested(r#"{"n":1.0}"#));
        assert_ne!(nested(r#"{"n":"1"}"#), nested(r#"{"n":1}"#));
        assert_ne!(nested(r#"{"a":{"b":1}}"#), nested(r#"{"a":{},"b":1}"#));
        assert_ne!(nested(r#"{"a":1}"#), nested(r#"{"a":1,"a":1}"#));
        // Not JSON: hashed as bytes.
        assert_ne!(nested("{"), nested("{ "));
        assert_ne!(
            a,
            fingerprint(id, &Method::POST, "/y", "", json, br#"{"a":1,"b":[1,2]}"#)
        );
        assert_ne!(
            a,
            fingerprint(
                Uuid::max(),
                &Method::POST,
                "/x",
                "",
                json,
                br#"{"a":1,"b":[1,2]}"#
            )
        );
        let part = |boundary: &str, value: &str| {
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n{value}\r\n--{boundary}--\r\n"
            )
        };
        let multipart = |boundary: &str, value: &str| {
            fingerprint(
                id,
                &Method::POST,
                "/x",
                "",
                Some(&format!("multipart/form-data; boundary={boundary}")),
                part(boundary, value).as_bytes(),
            )
        };
        assert_eq!(multipart("AAA111", "v"), multipart("BBB222", "v"));
        assert_ne!(multipart("AAA111", "v"), multipart("AAA111", "w"));
    }
}
