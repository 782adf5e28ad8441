//! Forms whose answer shows a secret once (a new API key's value, a new
//! webhook's signing secret, a new member's password) carry a one-time
//! `form_id`. Reloading that answer makes the browser send the form again;
//! the second submission must neither create a second object nor show a
//! secret, so each `form_id` is claimed once, in the same idempotency
//! records the API's `Idempotency-Key` uses (24 hours), under a name of its
//! own per form and member.

use sha2::{Digest, Sha256};
use unigen_db::DbError;
use unigen_db::queries::idempotency::{self, Claim, ClaimToken, StoredResponse};

use crate::error::DashError;
use crate::form::FormFields;
use crate::session::{SignedIn, random_token};
use crate::state::DashboardState;

/// The hidden field's name.
pub const FIELD: &str = "form_id";

/// A fresh id for a form page.
pub fn new_form_id() -> Result<String, DashError> {
    random_token()
}

/// A form submission's claim on its `form_id`.
pub struct OnceForm {
    claim: ClaimToken,
}

/// Whether this is the form's first submission.
pub enum Submission {
    First(OnceForm),
    /// Sent before (a reload or a second click): nothing is done again.
    Repeated,
}

impl OnceForm {
    /// Claims the form's id for `what` (`key`, `webhook`, `member`). A
    /// missing or malformed id is a 400: the page always sends one.
    pub async fn claim(
        state: &DashboardState,
        signed_in: &SignedIn,
        form: &FormFields,
        what: &str,
    ) -> Result<Submission, DashError> {
        let id = form.get(FIELD).unwrap_or("");
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(DashError::BadRequest(
                "The form is out of date: open it again and resubmit.".into(),
            ));
        }
        let key = format!("dashboard:{what}:{}:{id}", signed_in.member.id);
        let print: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        match idempotency::claim(&mut conn, signed_in.org_id(), &key, &print).await? {
            Claim::Claimed(claim) => Ok(Submission::First(OnceForm { claim })),
            Claim::Taken(_) => Ok(Submission::Repeated),
        }
    }

    /// The object was created: the id stays spent (nothing is stored with it).
    pub async fn done(self, state: &DashboardState, signed_in: &SignedIn) -> Result<(), DashError> {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        idempotency::complete(
            &mut conn,
            signed_in.org_id(),
            &self.claim,
            &StoredResponse {
                status_code: 201,
                content_type: None,
                body: None,
                agent_run_id: None,
            },
        )
        .await?;
        Ok(())
    }

    /// Nothing was created (the form was refused): it may be sent again.
    pub async fn release(
        self,
        state: &DashboardState,
        signed_in: &SignedIn,
    ) -> Result<(), DashError> {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        idempotency::release(&mut conn, signed_in.org_id(), &self.claim).await?;
        Ok(())
    }
}
