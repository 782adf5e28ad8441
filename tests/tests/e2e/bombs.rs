//! Decompression bombs in client data (issue: hardening, findings 2 and 8):
//! a knowledge-file PDF whose stream inflates to a gigabyte fails on its own
//! and the worker goes on; an image header declaring a huge canvas is a 400
//! naming the field, and no job is created.

use std::io::Write;
use std::time::Duration;

use flate2::Compression;
use flate2::write::ZlibEncoder;
use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

use crate::media::b64;

const WAIT: Duration = Duration::from_secs(90);

/// A one-page PDF whose page content is `content`, a FlateDecode stream.
fn pdf_with_flate_content(content: &[u8]) -> Vec<u8> {
    let mut stream = format!(
        "<< /Length {} /Filter /FlateDecode >>\nstream\n",
        content.len()
    )
    .into_bytes();
    stream.extend_from_slice(content);
    stream.extend_from_slice(b"\nendstream");
    let objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
          /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"
            .to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        stream,
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (number, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n", number + 1).as_bytes());
        pdf.extend_from_slice(body);
        pdf.extend_from_slice(b"\nendobj\n");
    }
    let xref_at = pdf.len();
    let mut xref = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
    for offset in offsets {
        xref.push_str(&format!("{offset:010} 00000 n \n"));
    }
    xref.push_str(&format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref_at}\n%%EOF\n",
        objects.len() + 1
    ));
    pdf.extend_from_slice(xref.as_bytes());
    pdf
}

/// `len` zero bytes, zlib-compressed a megabyte at a time: the test never
/// holds the inflated data.
fn zlib_zeros(len: usize) -> Vec<u8> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
    let chunk = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len());
        encoder.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    encoder.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

async fn create_agent(app: &TestApp) -> String {
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/agents",
            &app.key,
            &json!({"name": "Reader", "system_prompt": "Answer from the knowledge base."}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["agent"]["id"].as_str().unwrap().to_owned()
}

async fn upload(app: &TestApp, agent: &str, name: &str, bytes: Vec<u8>) -> String {
    let form = Form::new().part("file", Part::bytes(bytes).file_name(name.to_owned()));
    let (status, body) = json_of(
        app.client
            .post(app.url(&format!("/api/v1/agents/{agent}/knowledge")))
            .bearer_auth(&app.key)
            .multipart(form)
            .send()
            .await
            .expect("POST knowledge"),
    )
    .await;
    assert_eq!(status, 201, "{name}: {body}");
    body["file"]["id"].as_str().unwrap().to_owned()
}

/// Waits until the file is `completed` or `failed` and reads it through the API.
async fn wait_processed(app: &TestApp, agent: &str, id: &str) -> Value {
    let uuid: Uuid = id.parse().unwrap();
    let client = app.db.client().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status: String = client
            .query_one("SELECT status FROM knowledge_files WHERE id = $1", &[&uuid])
            .await
            .expect("the file row")
            .get(0);
        if status == "completed" || status == "failed" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "file {id} still {status} after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = json_of(
        app.get(&format!("/api/v1/agents/{agent}/knowledge/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["file"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdf_whose_stream_inflates_to_a_gigabyte_fails_alone_and_the_worker_goes_on() {
    let app = TestApp::spawn().await;
    let agent = create_agent(&app).await;
    let bomb = pdf_with_flate_content(&zlib_zeros(1 << 30));
    assert!(bomb.len() < 2 << 20, "the bomb is {} bytes", bomb.len());
    let id = upload(&app, &agent, "bomb.pdf", bomb).await;
    let file = wait_processed(&app, &agent, &id).await;
    assert_eq!(file["status"], "failed", "{file}");
    assert_eq!(
        file["error_message"], "the PDF's uncompressed content is too large: the limit is 128 MB",
        "{file}"
    );
    assert_eq!(file["chunk_count"], 0, "{file}");
    let attempts = app
        .db
        .scalar_i64(&format!(
            "SELECT attempt::bigint FROM knowledge_files WHERE id = '{id}'"
        ))
        .await;
    assert_eq!(attempts, 1, "a bomb is refused for good, not retried");

    // The same worker processes the next file, a compressed PDF included.
    let next = upload(
        &app,
        &agent,
        "fine.pdf",
        pdf_with_flate_content(&zlib(
            b"BT /F1 12 Tf 72 720 Td (The lighthouse keeper logs the tides) Tj ET",
        )),
    )
    .await;
    let file = wait_processed(&app, &agent, &next).await;
    assert_eq!(file["status"], "completed", "{file}");
    assert_eq!(file["error_message"], Value::Null, "{file}");
    assert!(file["chunk_count"].as_i64().unwrap() >= 1, "{file}");
}

/// A PNG of a few dozen bytes whose header declares `width` x `height`
/// RGBA: the signature, an IHDR chunk with its CRC, an empty IDAT, IEND.
fn png_declaring(width: u32, height: u32) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffff_u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(
        &mut png,
        b"IDAT",
        &[0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 1],
    );
    chunk(&mut png, b"IEND", &[]);
    png
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_declaring_a_huge_canvas_is_a_400_naming_the_field_and_creates_no_job() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let png = png_declaring(60_000, 60_000);
    assert!(png.len() < 100, "{} bytes", png.len());
    let uri = format!("data:image/png;base64,{}", b64(&png));
    let cases = [
        (
            "/api/v1/videos/generations",
            json!({"prompt": "waves", "duration_seconds": 1, "mode": "image_to_video", "source_image": uri}),
            "source_image",
        ),
        (
            "/api/v1/images/edits",
            json!({"image": uri, "operation": "colorization"}),
            "image",
        ),
    ];
    for (path, body, field) in cases {
        let (status, error) = json_of(app.post_json(path, &app.key, &body).await).await;
        assert_eq!(status, 400, "{path}: {error}");
        assert_eq!(error["error"]["param"], field, "{path}: {error}");
        assert_eq!(
            error["error"]["message"],
            format!("{field} must be at most 4096x4096 pixels"),
            "{path}: {error}"
        );
    }
    assert_eq!(app.count_jobs().await, 0);
}
