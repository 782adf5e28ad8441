//! The body of a keyed `POST` (`Idempotency-Key`), fingerprinted as it
//! arrives. A file upload (up to `batches.max_file_bytes`, 200 MB) is not
//! held in memory to be fingerprinted: it is spooled to an unlinked
//! temporary file while its digest is taken, then streamed from there to
//! the route, which streams it on to storage as it does an unkeyed upload.

use std::io::SeekFrom;
use std::pin::Pin;

use actix_web::HttpMessage;
use actix_web::dev::{Payload, ServiceRequest};
use actix_web::error::PayloadError;
use actix_web::http::Method;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::web::Bytes;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use uuid::Uuid;

use crate::error::ApiError;

/// A request's fingerprint: what identifies it apart from its body, then
/// the body's bytes as they come, multipart boundaries left out wherever
/// the chunks split them (a client's resend draws a new boundary).
pub struct BodyPrint {
    hash: Sha256,
    boundary: Option<Vec<u8>>,
    /// The tail of the bytes fed that could begin a boundary the next chunk
    /// completes.
    carry: Vec<u8>,
}

impl BodyPrint {
    pub fn new(
        api_key_id: Uuid,
        method: &Method,
        path: &str,
        query: &str,
        content_type: Option<&str>,
    ) -> Self {
        let mut hash = Sha256::new();
        for part in [
            api_key_id.as_bytes().as_slice(),
            method.as_str().as_bytes(),
            path.as_bytes(),
            query.as_bytes(),
        ] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        let mime = content_type.and_then(|ct| ct.parse::<actix_web::mime::Mime>().ok());
        let essence = mime
            .as_ref()
            .map(|m| m.essence_str().to_ascii_lowercase())
            .unwrap_or_default();
        hash.update((essence.len() as u64).to_le_bytes());
        hash.update(essence.as_bytes());
        let boundary = mime
            .as_ref()
            .and_then(|m| m.get_param(actix_web::mime::BOUNDARY))
            .map(|b| b.as_str().as_bytes().to_vec())
            .filter(|b| !b.is_empty());
        Self {
            hash,
            boundary,
            carry: Vec::new(),
        }
    }

    /// Hashes a whole body's digest in place of its bytes (canonical JSON).
    pub fn finish_with_digest(mut self, digest: [u8; 32]) -> [u8; 32] {
        self.hash.update(b"\0json\0");
        self.hash.update(digest);
        self.hash.finalize().into()
    }

    pub fn update(&mut self, chunk: &[u8]) {
        let Some(boundary) = &self.boundary else {
            self.hash.update(chunk);
            return;
        };
        self.carry.extend_from_slice(chunk);
        let finder = memchr::memmem::Finder::new(boundary);
        let mut start = 0;
        while let Some(at) = finder.find(&self.carry[start..]) {
            self.hash.update(&self.carry[start..start + at]);
            self.hash.update(b"\0boundary\0");
            start += at + boundary.len();
        }
        // No boundary starts before `cut` (it would have been found whole):
        // those bytes are hashed; the rest wait for the next chunk.
        let keep = (boundary.len() - 1).min(self.carry.len() - start);
        let cut = self.carry.len() - keep;
        self.hash.update(&self.carry[start..cut]);
        self.carry.drain(..cut);
    }

    pub fn finish(mut self) -> [u8; 32] {
        self.hash.update(&self.carry);
        self.hash.finalize().into()
    }
}

/// The declared length, refused unread when over `limit`.
pub fn declared_length(req: &ServiceRequest, limit: usize) -> Result<Option<u64>, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    Ok(declared)
}

/// Reads the body (at most `limit` bytes) into an unlinked temporary file,
/// feeding `print` as it goes, and hands the route a payload streamed from
/// that file. Memory: one chunk and a write buffer, whatever the size.
pub async fn spool(
    req: &mut ServiceRequest,
    limit: usize,
    print: &mut BodyPrint,
) -> Result<(), ApiError> {
    declared_length(req, limit)?;
    let mut file = anonymous_file().await?;
    let mut payload = req.take_payload();
    let mut written = 0usize;
    {
        let mut writer = tokio::io::BufWriter::with_capacity(256 * 1024, &mut file);
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|err| {
                ApiError::BadRequest(format!("the body could not be read: {err}"))
            })?;
            written += chunk.len();
            if written > limit {
                return Err(ApiError::PayloadTooLarge(limit));
            }
            print.update(&chunk);
            writer.write_all(&chunk).await.map_err(spool_failed)?;
        }
        writer.flush().await.map_err(spool_failed)?;
    }
    file.seek(SeekFrom::Start(0)).await.map_err(spool_failed)?;
    let stream: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> = Box::pin(
        tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024)
            .map(|chunk| chunk.map_err(PayloadError::Io)),
    );
    req.set_payload(Payload::Stream { payload: stream });
    Ok(())
}

/// A file in the temporary directory that no path names: created under a
/// random name and unlinked at once, so it goes when its handle does, a
/// crash included.
async fn anonymous_file() -> Result<tokio::fs::File, ApiError> {
    let path = std::env::temp_dir().join(format!("unigen-upload-{}", Uuid::new_v4().simple()));
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .await
        .map_err(spool_failed)?;
    tokio::fs::remove_file(&path).await.map_err(spool_failed)?;
    Ok(file)
}

fn spool_failed(err: std::io::Error) -> ApiError {
    ApiError::internal(anyhow::anyhow!(
        "spooling a keyed upload to a temporary file failed: {err}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print_of(chunks: &[&[u8]], content_type: &str) -> [u8; 32] {
        let mut print = BodyPrint::new(Uuid::nil(), &Method::POST, "/f", "", Some(content_type));
        for chunk in chunks {
            print.update(chunk);
        }
        print.finish()
    }

    #[test]
    fn a_multipart_body_prints_the_same_however_it_is_split_and_whatever_its_boundary() {
        let body = |b: &str| {
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{b}\r\n\
                 Content-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n{{\"x\":1}}\r\n--{b}--\r\n"
            )
        };
        let one = body("XyZ123");
        let whole = print_of(&[one.as_bytes()], "multipart/form-data; boundary=XyZ123");
        for split in 1..one.len() {
            let (a, b) = one.as_bytes().split_at(split);
            assert_eq!(
                print_of(&[a, b], "multipart/form-data; boundary=XyZ123"),
                whole,
                "split at {split}"
            );
        }
        let bytes: Vec<&[u8]> = one.as_bytes().chunks(1).collect();
        assert_eq!(
            print_of(&bytes, "multipart/form-data; boundary=XyZ123"),
            whole
        );
        let other = body("other-boundary-42");
        assert_eq!(
            print_of(
                &[other.as_bytes()],
                "multipart/form-data; boundary=other-boundary-42"
            ),
            whole,
            "a resend with another boundary is the same request"
        );
        let changed = one.replace("batch", "user_data");
        assert_ne!(
            print_of(
                &[changed.as_bytes()],
                "multipart/form-data; boundary=XyZ123"
            ),
            whole
        );
    }

    #[test]
    fn other_bodies_print_their_bytes_in_any_split() {
        let whole = print_of(&[b"hello world"], "text/plain");
        assert_eq!(print_of(&[b"hello", b" world"], "text/plain"), whole);
        assert_ne!(print_of(&[b"hello"], "text/plain"), whole);
    }
}
