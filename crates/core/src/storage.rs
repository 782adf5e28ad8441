//! Output files: a [`FileStore`] trait (local disk today; an S3-compatible
//! store can implement the same trait) and HMAC-signed, expiring URLs under
//! which the API serves them.
//!
//! Job rows keep storage keys (`"file": "<key>"`), never URLs: URLs are signed
//! when a job is presented, so a job read tomorrow still has working links.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::config::StorageSettings;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid storage key `{0}`")]
    InvalidKey(String),
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),
}

pub trait FileStore: Send + Sync {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>>;
    /// `Ok(None)` when there is no such file.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>>;
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;
    /// Deletes every file whose key starts with `<prefix>/` (a job's outputs,
    /// partial ones of failed attempts included). Missing is not an error.
    fn delete_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;
}

pub fn build_store(settings: &StorageSettings) -> Arc<dyn FileStore> {
    // Config validation admits only `local` for now.
    Arc::new(LocalDiskStore::new(settings.dir.clone()))
}

/// Files under a directory; keys are relative paths of plain segments.
pub struct LocalDiskStore {
    root: PathBuf,
}

impl LocalDiskStore {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn path_of(&self, key: &str) -> Result<PathBuf, StorageError> {
        validate_key(key)?;
        Ok(self.root.join(key))
    }
}

/// Keys are `segment/segment/...` of `[A-Za-z0-9._-]`, never `..` or absolute.
pub fn validate_key(key: &str) -> Result<(), StorageError> {
    let bad = || StorageError::InvalidKey(key.to_owned());
    if key.is_empty() || key.len() > 512 {
        return Err(bad());
    }
    let charset_ok = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'));
    // Split by hand: `Path::components` silently drops `.` and empty segments.
    let segments_ok = key
        .split('/')
        .all(|segment| !segment.is_empty() && !segment.starts_with('.'));
    if charset_ok && segments_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

impl FileStore for LocalDiskStore {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let path = self.path_of(key)?;
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            // Write then rename: readers never see a half-written file.
            let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
            tokio::fs::write(&tmp, bytes).await?;
            tokio::fs::rename(&tmp, &path).await?;
            Ok(())
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>> {
        Box::pin(async move {
            match tokio::fs::read(self.path_of(key)?).await {
                Ok(bytes) => Ok(Some(bytes)),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(err) => Err(err.into()),
            }
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            match tokio::fs::remove_file(self.path_of(key)?).await {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
                _ => Ok(()),
            }
        })
    }

    fn delete_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            match tokio::fs::remove_dir_all(self.path_of(prefix)?).await {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
                _ => Ok(()),
            }
        })
    }
}

/// Where the files a run's tools make are stored (`<prefix>/<step>-<name>`).
pub fn run_storage_prefix(run_id: uuid::Uuid) -> String {
    format!("agent-runs/{run_id}")
}

/// The folder of a knowledge file's stored bytes (deleted with the file).
pub fn knowledge_storage_prefix(org_id: uuid::Uuid, file_id: uuid::Uuid) -> String {
    format!("knowledge/{org_id}/{file_id}")
}

/// Signs and verifies `/files/<key>?expires=<unix>&sig=<hex>` URLs.
#[derive(Clone)]
pub struct UrlSigner {
    secret: Arc<[u8]>,
    base_url: String,
    ttl: Duration,
}

impl UrlSigner {
    pub fn new(secret: &str, public_base_url: &str, ttl: Duration) -> Self {
        Self {
            secret: secret.as_bytes().into(),
            base_url: public_base_url.trim_end_matches('/').to_owned(),
            ttl,
        }
    }

    pub fn sign_url(&self, key: &str, now_unix: i64) -> String {
        let expires = now_unix + self.ttl.as_secs() as i64;
        let sig = hex::encode(self.mac(key, expires).finalize().into_bytes());
        format!("{}/files/{key}?expires={expires}&sig={sig}", self.base_url)
    }

    /// The storage key of one of our own signed file URLs, if `url` is one
    /// whose signature and expiry verify.
    pub fn verified_key(&self, url: &str, now_unix: i64) -> Option<String> {
        let rest = url.strip_prefix(&self.base_url)?.strip_prefix("/files/")?;
        let (key, query) = rest.split_once('?')?;
        let mut expires = None;
        let mut sig = None;
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("expires", value)) => expires = value.parse::<i64>().ok(),
                Some(("sig", value)) => sig = Some(value),
                _ => {}
            }
        }
        self.verify(key, expires?, sig?, now_unix)
            .then(|| key.to_owned())
    }

    /// Constant-time check of the signature, then of the expiry.
    pub fn verify(&self, key: &str, expires: i64, sig_hex: &str, now_unix: i64) -> bool {
        let Ok(sig) = hex::decode(sig_hex) else {
            return false;
        };
        self.mac(key, expires).verify_slice(&sig).is_ok() && expires >= now_unix
    }

    fn mac(&self, key: &str, expires: i64) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC accepts any key length");
        mac.update(key.as_bytes());
        mac.update(b"\n");
        mac.update(expires.to_string().as_bytes());
        mac
    }
}

/// Client-supplied JSON passed through to a provider verbatim: whatever it
/// names is the client's text, never a file this server stored.
const CLIENT_JSON_FIELDS: [&str; 1] = ["model_inputs"];

/// Whether `key` is a file this server stored for `org_id`: a valid key under
/// the organization's prefix. Anything else in a job's JSON (a client's
/// string, another organization's key, a path) is neither signed nor deleted.
pub fn is_org_key(org_id: uuid::Uuid, key: &str) -> bool {
    validate_key(key).is_ok()
        && key
            .strip_prefix(org_id.to_string().as_str())
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Replaces the file keys `org_id`'s job recorded by signed URLs: `"file": k`
/// becomes `"url"`, `"<name>_file": k` becomes `"<name>_url"`, at any depth.
/// A file field naming anything else is left out; client JSON passed to
/// providers (`model_inputs`) is shown as it was sent.
pub fn present_files(
    value: &serde_json::Value,
    signer: &UrlSigner,
    now_unix: i64,
    org_id: uuid::Uuid,
) -> serde_json::Value {
    use serde_json::Value;
    let present = |v| present_files(v, signer, now_unix, org_id);
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, v)| {
                    let url_name = match k.as_str() {
                        "file" => Some("url".to_owned()),
                        name => name.strip_suffix("_file").map(|stem| format!("{stem}_url")),
                    };
                    match (url_name, v) {
                        _ if CLIENT_JSON_FIELDS.contains(&k.as_str()) => {
                            Some((k.clone(), v.clone()))
                        }
                        (Some(url_name), Value::String(key)) => is_org_key(org_id, key)
                            .then(|| (url_name, Value::String(signer.sign_url(key, now_unix)))),
                        _ => Some((k.clone(), present(v))),
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(present).collect()),
        other => other.clone(),
    }
}

/// Every file key `org_id`'s job recorded in its JSON (what [`present_files`]
/// signs): what retention deletes.
pub fn stored_files(value: &serde_json::Value, org_id: uuid::Uuid) -> Vec<String> {
    use serde_json::Value;
    let mut keys = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (name, v) in map {
                    if CLIENT_JSON_FIELDS.contains(&name.as_str()) {
                        continue;
                    }
                    match v {
                        Value::String(key) if name == "file" || name.ends_with("_file") => {
                            if is_org_key(org_id, key) {
                                keys.push(key.clone());
                            }
                        }
                        other => stack.push(other),
                    }
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ORG: uuid::Uuid = uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);
    const OTHER_ORG: uuid::Uuid = uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002);

    fn org_key(rest: &str) -> String {
        format!("{ORG}/{rest}")
    }

    #[test]
    fn stored_files_finds_every_key_present_files_would_sign() {
        let value = json!({
            "images": [{"file": org_key("j/0.png"), "width": 2}, {"file": org_key("j/1.png")}],
            "audio_file": org_key("j/s.mp3"),
            "inputs": {"image": {"file": org_key("inputs/a.png")}},
            "prompt": "a file",
        });
        let mut keys = stored_files(&value, ORG);
        keys.sort();
        assert_eq!(
            keys,
            [
                org_key("inputs/a.png"),
                org_key("j/0.png"),
                org_key("j/1.png"),
                org_key("j/s.mp3")
            ]
        );
    }

    #[test]
    fn keys_a_client_wrote_or_of_another_organization_are_neither_signed_nor_deleted() {
        let foreign = format!("{OTHER_ORG}/j/0.png");
        let value = json!({
            "model_inputs": {"file": org_key("j/0.png"), "nested": {"image_file": foreign}},
            "inputs": {"image": {"file": foreign}},
            "a_file": "../../etc/passwd",
            "b_file": format!("{ORG}x/j/0.png"),
            "c_file": format!("{ORG}/../{OTHER_ORG}/j/0.png"),
            "d_file": format!("{ORG}/"),
        });
        assert!(stored_files(&value, ORG).is_empty());
        let shown = present_files(&value, &signer(), 0, ORG);
        assert!(!shown.to_string().contains("/files/"), "{shown}");
        assert_eq!(
            shown["model_inputs"], value["model_inputs"],
            "client JSON is shown as sent"
        );
        assert_eq!(shown["inputs"]["image"], json!({}));
        assert_eq!(shown.as_object().unwrap().len(), 2, "{shown}");
    }

    fn signer() -> UrlSigner {
        UrlSigner::new("secret", "http://h:1/", Duration::from_secs(60))
    }

    fn query_of(url: &str) -> (i64, String) {
        let query = url.split_once('?').unwrap().1;
        let mut expires = 0;
        let mut sig = String::new();
        for pair in query.split('&') {
            match pair.split_once('=').unwrap() {
                ("expires", v) => expires = v.parse().unwrap(),
                ("sig", v) => sig = v.to_owned(),
                _ => {}
            }
        }
        (expires, sig)
    }

    #[test]
    fn signed_urls_verify_until_they_expire_and_only_for_their_key() {
        let url = signer().sign_url("org/job/0.png", 1_000);
        assert!(url.starts_with("http://h:1/files/org/job/0.png?expires=1060&sig="));
        let (expires, sig) = query_of(&url);
        assert!(signer().verify("org/job/0.png", expires, &sig, 1_060));
        assert!(!signer().verify("org/job/0.png", expires, &sig, 1_061));
        assert!(!signer().verify("org/job/1.png", expires, &sig, 1_000));
        assert!(!signer().verify("org/job/0.png", expires + 1, &sig, 1_000));
        let other = UrlSigner::new("other", "http://h:1", Duration::from_secs(60));
        assert!(!other.verify("org/job/0.png", expires, &sig, 1_000));
    }

    #[test]
    fn our_own_urls_are_recognised_only_with_a_valid_signature() {
        let url = signer().sign_url("org/job/0.png", 1_000);
        assert_eq!(
            signer().verified_key(&url, 1_000).as_deref(),
            Some("org/job/0.png")
        );
        assert_eq!(signer().verified_key(&url, 2_000), None, "expired");
        assert_eq!(
            signer().verified_key(&url.replace("0.png", "1.png"), 1_000),
            None,
            "tampered"
        );
        assert_eq!(
            signer().verified_key("https://elsewhere/files/org/job/0.png?expires=1&sig=00", 0),
            None
        );
    }

    #[test]
    fn keys_cannot_escape_the_storage_root() {
        for bad in [
            "../etc/passwd",
            "/abs",
            "a/../b",
            "a//b/.hidden",
            "",
            "a b",
            "a/./b",
        ] {
            assert!(validate_key(bad).is_err(), "{bad}");
        }
        assert!(validate_key("0190/abc-def/0.png").is_ok());
    }

    #[test]
    fn stored_file_keys_are_presented_as_signed_urls() {
        let raw = json!({
            "images": [{"file": org_key("a/0.png"), "width": 2}],
            "audio_file": org_key("a/s.mp3"),
            "n": 1,
        });
        let shown = present_files(&raw, &signer(), 0, ORG);
        assert!(
            shown["images"][0]["url"]
                .as_str()
                .unwrap()
                .contains(&format!("/files/{ORG}/a/0.png?"))
        );
        assert_eq!(shown["images"][0]["width"], 2);
        assert!(
            shown["audio_url"]
                .as_str()
                .unwrap()
                .contains(&format!("/files/{ORG}/a/s.mp3?"))
        );
        assert!(shown.get("audio_file").is_none());
        assert_eq!(shown["n"], 1);
    }

    #[tokio::test]
    async fn local_store_round_trips_and_deletes() {
        let dir = std::env::temp_dir().join(format!("unigen-store-{}", uuid::Uuid::new_v4()));
        let store = LocalDiskStore::new(dir.clone());
        store.put("x/y.bin", vec![1, 2, 3]).await.unwrap();
        assert_eq!(store.get("x/y.bin").await.unwrap(), Some(vec![1, 2, 3]));
        store.delete("x/y.bin").await.unwrap();
        assert_eq!(store.get("x/y.bin").await.unwrap(), None);
        assert!(store.get("../y.bin").await.is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
