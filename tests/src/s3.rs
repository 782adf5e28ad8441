//! A real S3-compatible server for storage tests: `s3s-fs` from crates.io
//! (`scripts/lib/common.sh` `ensure_s3_server` installs it), one process per
//! test on a free port with its own root directory. Each test makes its own
//! bucket through the S3 API.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use futures_util::TryStreamExt;
use unigen_core::config::S3Settings;
use unigen_core::storage::object_store::path::Path as ObjectPath;
use unigen_core::storage::object_store::signer::{Method, Signer};
use unigen_core::storage::object_store::{ObjectStore, ObjectStoreExt};
use unigen_core::storage::s3_builder;
use uuid::Uuid;

/// The version `ensure_s3_server` installs.
pub const S3S_FS_VERSION: &str = "0.14.1";

const ACCESS_KEY: &str = "unigen-test";

/// A running `s3s-fs`; killed, and its directory removed, when dropped.
pub struct S3Server {
    pub endpoint: String,
    pub root: PathBuf,
    secret_key: String,
    child: tokio::process::Child,
}

/// `s3s-fs`: `UNIGEN_S3S_FS` if set, else the one on `PATH`, else cargo's.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("UNIGEN_S3S_FS") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("s3s-fs"))
            .find(|path| path.is_file())
    });
    on_path.or_else(|| {
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))?;
        Some(cargo_home.join("bin/s3s-fs")).filter(|path| path.is_file())
    })
}

impl S3Server {
    /// Starts a server, or `None` (with a message) when `s3s-fs` is not
    /// installed. Under `CI=true` a missing server fails the test instead.
    pub async fn start() -> Option<S3Server> {
        let Some(binary) = binary() else {
            let how = format!(
                "s3s-fs is not installed: run `cargo install s3s-fs --locked --version \
                 {S3S_FS_VERSION} --features binary` (scripts/lib/common.sh ensure_s3_server)"
            );
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{how}");
            }
            eprintln!("SKIPPED: {how}");
            return None;
        };
        Some(
            Self::spawn(binary)
                .await
                .expect("starting the s3s-fs test server"),
        )
    }

    async fn spawn(binary: PathBuf) -> anyhow::Result<S3Server> {
        let tag = Uuid::new_v4().simple().to_string();
        let root = std::env::temp_dir().join(format!("unigen-s3-{}", &tag[..12]));
        std::fs::create_dir_all(&root)?;
        let secret_key = format!("secret-{tag}");
        // A free port: the kernel's pick, released just before s3s-fs binds it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = tokio::process::Command::new(&binary)
            .arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(port.to_string())
            .arg("--access-key")
            .arg(ACCESS_KEY)
            .arg("--secret-key")
            .arg(&secret_key)
            .arg(&root)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("running {}", binary.display()))?;
        let mut server = S3Server {
            endpoint: format!("http://127.0.0.1:{port}"),
            root,
            secret_key,
            child,
        };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait()? {
                anyhow::bail!("s3s-fs exited at start: {status}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("s3s-fs never listened on port {port}")
    }

    /// Settings for `bucket` on this server (path-style, plain http).
    pub fn settings(&self, bucket: &str) -> S3Settings {
        S3Settings {
            bucket: bucket.to_owned(),
            region: Some("us-east-1".into()),
            endpoint: Some(self.endpoint.clone()),
            access_key_id: Some(ACCESS_KEY.into()),
            secret_access_key: Some(self.secret_key.clone()),
            allow_http: true,
            path_style: true,
            presign_seconds: None,
        }
    }

    fn client(&self, bucket: &str) -> impl ObjectStore + Signer {
        s3_builder(&self.settings(bucket))
            .build()
            .expect("an S3 client")
    }

    /// Makes a fresh bucket (S3 CreateBucket) and returns its name.
    pub async fn create_bucket(&self) -> String {
        let bucket = format!("t-{}", &Uuid::new_v4().simple().to_string()[..16]);
        // CreateBucket is `PUT /<bucket>/`: a presigned PUT of the empty key.
        let url = self
            .client(&bucket)
            .signed_url(Method::PUT, &ObjectPath::default(), Duration::from_secs(60))
            .await
            .expect("a presigned CreateBucket URL");
        let response = reqwest::Client::new()
            .put(url)
            .send()
            .await
            .expect("CreateBucket");
        let status = response.status();
        assert!(
            status.is_success(),
            "CreateBucket {bucket}: {status} {}",
            response.text().await.unwrap_or_default()
        );
        bucket
    }

    /// Every key in `bucket` (S3 ListObjectsV2), sorted.
    pub async fn list(&self, bucket: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .client(bucket)
            .list(None)
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .expect("ListObjectsV2");
        keys.sort();
        keys
    }

    /// The bytes of `key` in `bucket` (S3 GetObject).
    pub async fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        self.client(bucket)
            .get(&ObjectPath::parse(key).expect("a key"))
            .await
            .expect("GetObject")
            .bytes()
            .await
            .expect("the object's bytes")
            .to_vec()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
