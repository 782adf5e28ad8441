//! Output files: a [`FileStore`] trait, implemented by [`ObjectFileStore`]
//! on the `object_store` crate (local disk, or an S3-compatible bucket:
//! AWS, MinIO, R2...; `[storage] backend`), and HMAC-signed, expiring URLs
//! under which the API serves them.
//!
//! Job rows keep storage keys (`"file": "<key>"`), never URLs: URLs are signed
//! when a job is presented, so a job read tomorrow still has working links.
//! Every key is checked by [`validate_key`] before it names an object: nothing
//! a client sends reaches a path.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use hmac::{Hmac, KeyInit, Mac};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::{
    Attribute, Attributes, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutOptions,
    PutPayload,
};
use sha2::Sha256;

use crate::config::{S3Settings, StorageSettings};

/// The `object_store` this module is built on (tests list buckets with it).
pub use object_store;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid storage key `{0}`")]
    InvalidKey(String),
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("object store failed: {0}")]
    Object(#[from] object_store::Error),
}

/// A stored file's bytes, read as they are sent (never whole in memory).
pub type ByteStream = BoxStream<'static, Result<Bytes, StorageError>>;

/// What [`FileStore::head`] tells about a stored file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    /// A strong entity tag, quoted (`"..."`): the store's own (S3's ETag;
    /// inode, mtime and size on local disk), stable while the file is.
    pub e_tag: String,
    pub last_modified: chrono::DateTime<chrono::Utc>,
}

pub trait FileStore: Send + Sync {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>>;
    /// Writes the file from `chunks` as they come (a multipart upload: never
    /// whole in memory); answers the bytes written. An error from `chunks`
    /// aborts the upload: nothing is stored.
    fn put_stream<'a>(
        &'a self,
        key: &'a str,
        chunks: ByteStream,
    ) -> BoxFuture<'a, Result<u64, StorageError>>;
    /// `Ok(None)` when there is no such file.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>>;
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;
    /// Deletes every file whose key starts with `<prefix>/` (a job's outputs,
    /// partial ones of failed attempts included). Missing is not an error.
    fn delete_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;
    /// Size and entity tag; `Ok(None)` when there is no such file.
    fn head<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<FileMeta>, StorageError>>;
    /// The bytes `range` of a file (within its size, as [`FileStore::head`]
    /// gave it), streamed; `Ok(None)` when there is no such file.
    fn stream<'a>(
        &'a self,
        key: &'a str,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<Option<ByteStream>, StorageError>>;
    /// A presigned GET URL of the file when the store is configured to hand
    /// them out (`storage.s3.presign_seconds`), else `Ok(None)`.
    fn presigned_get<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StorageError>>;
}

/// The store `[storage]` configures; an error when the S3 client cannot be
/// built from the settings (`Settings::validate` checked the bucket; the
/// rest is the `object_store` builder's).
pub fn build_store(settings: &StorageSettings) -> Result<Arc<dyn FileStore>, StorageError> {
    Ok(Arc::new(try_build_store(settings)?))
}

/// The configured store, by its concrete type.
pub fn try_build_store(settings: &StorageSettings) -> Result<ObjectFileStore, StorageError> {
    match settings.backend.as_str() {
        "s3" => ObjectFileStore::s3(&settings.s3),
        _ => Ok(ObjectFileStore::local(settings.dir.clone())),
    }
}

/// The old name of the local-disk store: [`ObjectFileStore::new`].
pub type LocalDiskStore = ObjectFileStore;

/// A [`FileStore`] on an `object_store` backend.
pub struct ObjectFileStore {
    inner: Arc<dyn ObjectStore>,
    backend: Backend,
}

enum Backend {
    /// Files under `root` (absolute): key `a/b` is the file `<root>/a/b`,
    /// the layout of the stores before `object_store`.
    Local { root: PathBuf },
    S3 {
        s3: Arc<AmazonS3>,
        presign: Option<Duration>,
    },
}

impl ObjectFileStore {
    /// Files on local disk under `root` (see [`ObjectFileStore::local`]).
    pub fn new(root: PathBuf) -> Self {
        Self::local(root)
    }

    /// Files on local disk under `root`, created on the first write. A
    /// relative `root` is taken from the current directory now.
    pub fn local(root: PathBuf) -> Self {
        let root = std::path::absolute(&root).unwrap_or(root);
        Self {
            inner: Arc::new(LocalFileSystem::new()),
            backend: Backend::Local { root },
        }
    }

    /// Objects in an S3-compatible bucket. Credentials, region and endpoint
    /// not given in `settings` come from the standard `AWS_*` variables.
    pub fn s3(settings: &S3Settings) -> Result<Self, StorageError> {
        let s3 = Arc::new(s3_builder(settings).build()?);
        Ok(Self {
            inner: s3.clone(),
            backend: Backend::S3 {
                s3,
                presign: settings.presign_seconds.map(Duration::from_secs),
            },
        })
    }

    fn location(&self, key: &str) -> Result<ObjectPath, StorageError> {
        validate_key(key)?;
        let bad = |_| StorageError::InvalidKey(key.to_owned());
        match &self.backend {
            Backend::Local { root } => ObjectPath::from_absolute_path(root.join(key)).map_err(bad),
            Backend::S3 { .. } => ObjectPath::parse(key).map_err(bad),
        }
    }
}

/// The builder of `settings`' bucket: `AWS_*` variables first, then what
/// `settings` names.
pub fn s3_builder(settings: &S3Settings) -> AmazonS3Builder {
    let set = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(&settings.bucket)
        .with_allow_http(settings.allow_http)
        .with_virtual_hosted_style_request(!settings.path_style);
    if let Some(region) = set(&settings.region) {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = set(&settings.endpoint) {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(id) = set(&settings.access_key_id) {
        builder = builder.with_access_key_id(id);
    }
    if let Some(secret) = set(&settings.secret_access_key) {
        builder = builder.with_secret_access_key(secret);
    }
    builder
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

fn is_not_found(err: &object_store::Error) -> bool {
    matches!(err, object_store::Error::NotFound { .. })
}

/// `e_tag` as a strong, quoted entity tag; one made of the size and the
/// modification time when the store has none.
fn quoted_e_tag(meta: &object_store::ObjectMeta) -> String {
    let raw = meta.e_tag.clone().unwrap_or_else(|| {
        format!(
            "{:x}-{:x}",
            meta.size,
            meta.last_modified.timestamp_micros()
        )
    });
    let bare = raw.trim_start_matches("W/").trim_matches('"');
    format!("\"{bare}\"")
}

impl FileStore for ObjectFileStore {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let location = self.location(key)?;
            // LocalFileSystem writes a staging file and renames it: readers
            // never see a half-written file. S3 objects appear whole.
            let mut options = PutOptions::default();
            if let Backend::S3 { .. } = self.backend {
                // Served as is from presigned URLs.
                let content_type = mime_guess::from_path(key).first_or_octet_stream();
                options.attributes = Attributes::from_iter([(
                    Attribute::ContentType,
                    content_type.essence_str().to_owned(),
                )]);
            }
            self.inner
                .put_opts(&location, PutPayload::from(bytes), options)
                .await?;
            Ok(())
        })
    }

    fn put_stream<'a>(
        &'a self,
        key: &'a str,
        mut chunks: ByteStream,
    ) -> BoxFuture<'a, Result<u64, StorageError>> {
        Box::pin(async move {
            let location = self.location(key)?;
            let mut options = object_store::PutMultipartOptions::default();
            if let Backend::S3 { .. } = self.backend {
                let content_type = mime_guess::from_path(key).first_or_octet_stream();
                options.attributes = Attributes::from_iter([(
                    Attribute::ContentType,
                    content_type.essence_str().to_owned(),
                )]);
            }
            let upload = self.inner.put_multipart_opts(&location, options).await?;
            let mut writer = object_store::WriteMultipart::new(upload);
            let mut written = 0u64;
            while let Some(chunk) = chunks.next().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(err) => {
                        let _ = writer.abort().await;
                        return Err(err);
                    }
                };
                // At most a few parts in flight: memory stays bounded.
                if let Err(err) = writer.wait_for_capacity(2).await {
                    let _ = writer.abort().await;
                    return Err(err.into());
                }
                written += chunk.len() as u64;
                writer.put(chunk);
            }
            writer.finish().await?;
            Ok(written)
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>> {
        Box::pin(async move {
            let location = self.location(key)?;
            let result = match self.inner.get(&location).await {
                Ok(result) => result,
                Err(err) if is_not_found(&err) => return Ok(None),
                Err(err) => return Err(err.into()),
            };
            Ok(Some(result.bytes().await?.to_vec()))
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            match self.inner.delete(&self.location(key)?).await {
                Err(err) if !is_not_found(&err) => Err(err.into()),
                _ => Ok(()),
            }
        })
    }

    fn delete_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let location = self.location(prefix)?;
            match &self.backend {
                // The directory goes too, as before `object_store`.
                Backend::Local { root } => match tokio::fs::remove_dir_all(root.join(prefix)).await
                {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
                    _ => Ok(()),
                },
                // Listing is by whole segments: `a/b` never matches `a/bc/x`.
                Backend::S3 { .. } => {
                    let listed = self
                        .inner
                        .list(Some(&location))
                        .map_ok(|meta| meta.location)
                        .boxed();
                    let mut deleted = self.inner.delete_stream(listed);
                    while let Some(result) = deleted.next().await {
                        match result {
                            Err(err) if !is_not_found(&err) => return Err(err.into()),
                            _ => {}
                        }
                    }
                    Ok(())
                }
            }
        })
    }

    fn head<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<FileMeta>, StorageError>> {
        Box::pin(async move {
            match self.inner.head(&self.location(key)?).await {
                Ok(meta) => Ok(Some(FileMeta {
                    size: meta.size,
                    e_tag: quoted_e_tag(&meta),
                    last_modified: meta.last_modified,
                })),
                // A directory on local disk is NotFound too.
                Err(err) if is_not_found(&err) => Ok(None),
                Err(err) => Err(err.into()),
            }
        })
    }

    fn stream<'a>(
        &'a self,
        key: &'a str,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<Option<ByteStream>, StorageError>> {
        Box::pin(async move {
            let location = self.location(key)?;
            if range.is_empty() {
                return Ok(Some(futures_util::stream::empty().boxed()));
            }
            let options = GetOptions {
                range: Some(GetRange::Bounded(range)),
                ..Default::default()
            };
            match self.inner.get_opts(&location, options).await {
                Ok(result) => Ok(Some(
                    result.into_stream().map_err(StorageError::from).boxed(),
                )),
                Err(err) if is_not_found(&err) => Ok(None),
                Err(err) => Err(err.into()),
            }
        })
    }

    fn presigned_get<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StorageError>> {
        Box::pin(async move {
            let location = self.location(key)?;
            match &self.backend {
                Backend::S3 {
                    s3,
                    presign: Some(ttl),
                } => {
                    let url = s3
                        .signed_url(object_store::signer::Method::GET, &location, *ttl)
                        .await?;
                    Ok(Some(url.to_string()))
                }
                _ => Ok(None),
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

/// Client-supplied JSON passed through to a provider verbatim, and a
/// background `response` object (a model's answer and the client's
/// `metadata`): whatever they name is text, never a file this server stored.
const CLIENT_JSON_FIELDS: [&str; 2] = ["model_inputs", "response"];

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
    async fn local_store_streams_ranges_with_a_stable_tag_and_deletes_prefixes() {
        use futures_util::TryStreamExt;
        let dir = std::env::temp_dir().join(format!("unigen-store-{}", uuid::Uuid::new_v4()));
        let store = LocalDiskStore::new(dir.clone());
        let bytes: Vec<u8> = (0..=255).collect();
        store.put("o/j/0.mp4", bytes.clone()).await.unwrap();
        store.put("o/j/1.png", vec![1]).await.unwrap();
        store.put("o/jx/0.png", vec![2]).await.unwrap();
        assert_eq!(
            std::fs::read(dir.join("o/j/0.mp4")).unwrap(),
            bytes,
            "layout"
        );
        let meta = store.head("o/j/0.mp4").await.unwrap().unwrap();
        assert_eq!(meta.size, 256);
        assert!(meta.e_tag.starts_with('"') && meta.e_tag.ends_with('"'));
        assert_eq!(store.head("o/j/0.mp4").await.unwrap().unwrap(), meta);
        let read = |range| async {
            let stream = store.stream("o/j/0.mp4", range).await.unwrap().unwrap();
            let chunks: Vec<Bytes> = stream.try_collect().await.unwrap();
            chunks.concat()
        };
        assert_eq!(read(10..20).await, &bytes[10..20]);
        assert_eq!(read(0..256).await, bytes);
        assert!(read(5..5).await.is_empty());
        assert_eq!(store.head("o/j").await.unwrap(), None, "a directory");
        assert_eq!(store.head("o/none").await.unwrap(), None);
        assert!(store.stream("o/none", 0..1).await.unwrap().is_none());
        assert_eq!(store.presigned_get("o/j/0.mp4").await.unwrap(), None);
        assert!(store.head("o/../x").await.is_err());
        store.delete_prefix("o/j").await.unwrap();
        assert!(!dir.join("o/j").exists());
        assert_eq!(store.get("o/jx/0.png").await.unwrap(), Some(vec![2]));
        store.delete_prefix("o/j").await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn s3_settings_build_a_client() {
        let settings = S3Settings {
            bucket: "b".into(),
            endpoint: Some("http://127.0.0.1:1".into()),
            allow_http: true,
            presign_seconds: Some(60),
            ..S3Settings::default()
        };
        assert!(ObjectFileStore::s3(&settings).is_ok());
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
