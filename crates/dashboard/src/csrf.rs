//! CSRF: every state-changing form carries the session's token in a hidden
//! `csrf_token` field; a missing token or another session's is a 403 and
//! nothing changes. (The sign-in form, before any session, is checked
//! against a cookie it set instead: see `pages::login`.)

use subtle::ConstantTimeEq;

use crate::error::DashError;
use crate::session::SignedIn;

/// The hidden field's name.
pub const FIELD: &str = "csrf_token";

pub struct Csrf;

impl Csrf {
    /// `Ok` when `token` is this session's token (constant-time compare).
    pub fn check(signed_in: &SignedIn, token: &str) -> Result<(), DashError> {
        if tokens_match(&signed_in.csrf_token, token) {
            Ok(())
        } else {
            Err(DashError::CsrfRejected)
        }
    }
}

/// Constant-time equality of two tokens; an empty expected token matches nothing.
pub fn tokens_match(expected: &str, given: &str) -> bool {
    !expected.is_empty()
        && expected.len() == given.len()
        && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_token_matches() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abc", "abd"));
        assert!(!tokens_match("abc", "ab"));
        assert!(!tokens_match("", ""));
    }
}
