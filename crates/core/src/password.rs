//! Dashboard member passwords: argon2id (the crate's default parameters,
//! OWASP's minimum: 19 MiB, 2 passes), stored as a PHC string. Both the
//! operator CLI and the dashboard's sign-in use it. Hashing takes tens of
//! milliseconds of CPU: async callers run it on a blocking thread.

use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};

/// Shortest password accepted when one is set.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Longest password accepted (argon2 takes any length; this bounds the work).
pub const MAX_PASSWORD_CHARS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("the password must have at least {MIN_PASSWORD_CHARS} characters")]
    TooShort,
    #[error("the password must have at most {MAX_PASSWORD_CHARS} characters")]
    TooLong,
    #[error("hashing the password failed: {0}")]
    Hashing(String),
}

/// Hashes a new password (length checked first) to an argon2id PHC string
/// with a random salt.
pub fn hash_password(password: &str) -> Result<String, PasswordError> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        return Err(PasswordError::TooShort);
    }
    if chars > MAX_PASSWORD_CHARS {
        return Err(PasswordError::TooLong);
    }
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.to_string())
        .map_err(|e| PasswordError::Hashing(e.to_string()))
}

/// Whether `password` matches the stored PHC string. A malformed stored
/// hash matches nothing.
pub fn verify_password(password: &str, stored: &str) -> bool {
    if password.len() > MAX_PASSWORD_CHARS * 4 {
        return false;
    }
    Argon2::default()
        .verify_password(password.as_bytes(), stored)
        .is_ok()
}

/// A fixed hash verified when no member has the email, so an unknown email
/// costs the same time as a wrong password.
pub fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("unigen-dummy-password-never-matches").unwrap_or_default())
}

/// A random password for a new member, shown once: 24 characters from
/// an unambiguous alphabet (about 130 bits).
pub fn generate_password() -> Result<String, getrandom::Error> {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)?;
    Ok(bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_passwords_verify_and_others_do_not() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("correct horse batterY", &hash));
        assert!(!verify_password("anything", "not a phc string"));
        assert!(!verify_password("anything", dummy_hash()));
    }

    #[test]
    fn short_and_huge_passwords_are_refused() {
        assert!(matches!(
            hash_password("short"),
            Err(PasswordError::TooShort)
        ));
        let huge = "x".repeat(MAX_PASSWORD_CHARS + 1);
        assert!(matches!(hash_password(&huge), Err(PasswordError::TooLong)));
    }

    #[test]
    fn generated_passwords_are_long_and_distinct() {
        let a = generate_password().unwrap();
        let b = generate_password().unwrap();
        assert_eq!(a.chars().count(), 24);
        assert!(hash_password(&a).is_ok());
        assert_ne!(a, b);
    }
}
