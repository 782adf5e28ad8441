use sha2::{Digest, Sha256};

const PREFIX: &str = "sk_";
const HEX_LEN: usize = 64;

/// A freshly generated key: the plaintext is shown once, only the hash is stored.
pub struct ApiKeyMaterial {
    pub plaintext: String,
    pub hash: [u8; 32],
    /// `sk_` plus the first 6 hex characters: enough to tell keys apart in a listing.
    pub display_prefix: String,
}

impl std::fmt::Debug for ApiKeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the plaintext, even in debug output.
        f.debug_struct("ApiKeyMaterial")
            .field("display_prefix", &self.display_prefix)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct KeyFormatError(String);

impl ApiKeyMaterial {
    /// 32 bytes from the OS CSPRNG, hex encoded: `sk_` + 64 hex.
    pub fn generate() -> Result<Self, KeyFormatError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| KeyFormatError(e.to_string()))?;
        let plaintext = format!("{PREFIX}{}", hex::encode(bytes));
        let hash = hash_key(&plaintext);
        let display_prefix = plaintext[..PREFIX.len() + 6].to_owned();
        Ok(Self {
            plaintext,
            hash,
            display_prefix,
        })
    }
}

/// SHA-256 of the whole key string (prefix included).
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Cheap syntactic check before touching the database.
pub fn looks_like_key(key: &str) -> bool {
    key.len() == PREFIX.len() + HEX_LEN
        && key.starts_with(PREFIX)
        && key[PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_spec_format_and_distinct_values() {
        let a = ApiKeyMaterial::generate().unwrap();
        let b = ApiKeyMaterial::generate().unwrap();
        assert!(looks_like_key(&a.plaintext), "{}", a.display_prefix);
        assert_eq!(a.plaintext.len(), 67);
        assert_ne!(a.plaintext, b.plaintext);
        assert!(a.plaintext.starts_with(&a.display_prefix));
        assert!(!format!("{a:?}").contains(&a.plaintext));
    }

    #[test]
    fn hash_is_sha256_of_the_full_key() {
        // sha256("sk_" + 64 zeros), computed independently with coreutils' sha256sum.
        let key = format!("sk_{}", "0".repeat(64));
        assert_eq!(
            hex::encode(hash_key(&key)),
            "0d7f11803834307e0a89dbf3e61485c9aa4e1564ad5c0ff0b4807d4bdc333824"
        );
    }

    #[test]
    fn malformed_keys_are_recognised() {
        assert!(!looks_like_key("sk_abc"));
        assert!(!looks_like_key(&format!("pk_{}", "a".repeat(64))));
        assert!(!looks_like_key(&format!("sk_{}", "g".repeat(64))));
        assert!(!looks_like_key(&format!("sk_{}", "A".repeat(64))));
    }
}
