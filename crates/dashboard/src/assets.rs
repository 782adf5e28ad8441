//! The stylesheet and the script, embedded in the binary and served under
//! `{prefix}/assets/` with a year's cache: their URLs carry a hash of both
//! (`?v=`), so a new build is fetched anew.

use std::sync::OnceLock;

use actix_web::{HttpResponse, web};
use sha2::{Digest, Sha256};

pub const CSS: &str = include_str!("../assets/dashboard.css");
pub const JS: &str = include_str!("../assets/dashboard.js");

/// The first 12 hex characters of the assets' SHA-256.
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let mut hash = Sha256::new();
        hash.update(CSS.as_bytes());
        hash.update(JS.as_bytes());
        hex::encode(hash.finalize())[..12].to_owned()
    })
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/assets/dashboard.css", web::get().to(css))
        .route("/assets/dashboard.js", web::get().to(js));
}

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "public, max-age=31536000, immutable"))
        .body(body)
}

async fn css() -> HttpResponse {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> HttpResponse {
    asset("text/javascript; charset=utf-8", JS)
}
