//! Loading client-supplied media: `http(s)` URLs fetched with a size cap, a
//! timeout, and no access to private, loopback or link-local addresses
//! (unless configured), or inline base64 data (`data:` URIs or bare base64).
//! The bytes are checked against the formats the field accepts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect;

use crate::config::FetchSettings;

const MAX_REDIRECTS: usize = 5;

/// What a field accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// JPEG, PNG, WebP.
    Image,
    /// MP3, WAV, M4A, FLAC, OGG, WebM.
    Audio,
    /// MP4/MOV, WebM/MKV.
    Video,
}

impl MediaKind {
    fn accepted(self) -> &'static str {
        match self {
            MediaKind::Image => "a JPEG, PNG or WebP image",
            MediaKind::Audio => "MP3, WAV, M4A, FLAC, OGG or WebM audio",
            MediaKind::Video => "an MP4, MOV or WebM video",
        }
    }
}

/// The loaded bytes and the file extension their format uses.
#[derive(Debug, Clone)]
pub struct Media {
    pub bytes: Vec<u8>,
    pub extension: &'static str,
}

/// Why a field's media could not be loaded; messages name the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct FetchError {
    pub field: &'static str,
    pub reason: String,
}

fn error(field: &'static str, reason: impl Into<String>) -> FetchError {
    FetchError {
        field,
        reason: reason.into(),
    }
}

/// Refuses names that resolve only to non-public addresses.
pub struct GuardedResolver {
    allow_private: bool,
}

impl GuardedResolver {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allow_private = self.allow_private;
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| allow_private || is_public(addr.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(format!("{host} resolves to no public address").into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Addresses reachable on the public internet (not loopback, private, link-local,
/// shared, unspecified, multicast or documentation ranges).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || (a == 192 && b == 0 && v4.octets()[2] == 0) // IETF protocol assignments
                || (a == 192 && b == 88 && v4.octets()[2] == 99) // 6to4 relay anycast
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            // An IPv4 address inside an IPv6 one reaches that IPv4 host:
            // judge it as such.
            if let Some(v4) = embedded_ipv4(v6) {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
                || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated, still routed by some)
                || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 local use, 64:ff9b:1::/48
                || (s[0] == 0x2001 && s[1] == 0) // Teredo: the IPv4 inside is obfuscated
                || (s[0] == 0x2001 && s[1] == 0x0db8)) // documentation
        }
    }
}

/// The IPv4 address an IPv6 address carries: mapped (`::ffff:a.b.c.d`),
/// compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`).
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let last32 = || Ipv4Addr::from(((u32::from(s[6])) << 16) | u32::from(s[7]));
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified() {
        return Some(last32());
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(last32());
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    None
}

fn host_allowed(url: &reqwest::Url, allow_private: bool) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => allow_private || is_public(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => allow_private || is_public(IpAddr::V6(ip)),
        // Names are checked by the resolver.
        Some(url::Host::Domain(_)) => true,
        None => false,
    }
}

/// Loads media for request fields. Cheap to clone.
#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    max_bytes: usize,
    allow_private: bool,
}

impl Fetcher {
    pub fn new(settings: &FetchSettings) -> Self {
        let allow_private = settings.allow_private_addresses;
        let policy = redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if !matches!(attempt.url().scheme(), "http" | "https") {
                attempt.error("redirect to a non-http(s) URL")
            } else if !host_allowed(attempt.url(), allow_private) {
                attempt.error("redirect to a private address")
            } else {
                attempt.follow()
            }
        });
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.timeout_seconds))
            .connect_timeout(Duration::from_secs(settings.timeout_seconds.min(10)))
            .redirect(policy)
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .user_agent(concat!("unigen/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the HTTP client configuration is valid");
        Self {
            client,
            max_bytes: settings.max_bytes,
            allow_private,
        }
    }

    /// Loads `input` (URL or base64) for `field` and checks it is `kind`.
    pub async fn load(
        &self,
        field: &'static str,
        input: &str,
        kind: MediaKind,
    ) -> Result<Media, FetchError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(error(field, "is required"));
        }
        let bytes = if input.starts_with("http://") || input.starts_with("https://") {
            self.fetch(field, input).await?
        } else if let Some(rest) = input.strip_prefix("data:") {
            let (_, data) = rest.split_once(";base64,").ok_or_else(|| {
                error(
                    field,
                    "must be a base64 data URI (data:<type>;base64,<data>)",
                )
            })?;
            self.decode_base64(field, data)?
        } else if input.contains("://") {
            return Err(error(field, "must be an http(s) URL or base64 data"));
        } else {
            self.decode_base64(field, input)?
        };
        let extension = sniff(&bytes, kind)
            .ok_or_else(|| error(field, format!("is not {}", kind.accepted())))?;
        Ok(Media { bytes, extension })
    }

    /// Largest input a field may carry, however it arrives.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Checks bytes uploaded for `field` (a multipart file) as [`Self::load`]
    /// checks fetched ones: same size cap, same formats, same messages.
    pub fn accept(
        &self,
        field: &'static str,
        bytes: Vec<u8>,
        kind: MediaKind,
    ) -> Result<Media, FetchError> {
        if bytes.is_empty() {
            return Err(error(field, "is required"));
        }
        if bytes.len() > self.max_bytes {
            return Err(error(
                field,
                format!("is larger than {}", human_size(self.max_bytes)),
            ));
        }
        let extension = sniff(&bytes, kind)
            .ok_or_else(|| error(field, format!("is not {}", kind.accepted())))?;
        Ok(Media { bytes, extension })
    }

    /// The message of an upload over [`Self::max_bytes`].
    pub fn too_large(&self, field: &'static str) -> FetchError {
        error(
            field,
            format!("is larger than {}", human_size(self.max_bytes)),
        )
    }

    fn decode_base64(&self, field: &'static str, data: &str) -> Result<Vec<u8>, FetchError> {
        // 4 characters carry 3 bytes: refuse oversized input before decoding.
        if data.len() / 4 * 3 > self.max_bytes + 3 {
            return Err(error(
                field,
                format!("is larger than {}", human_size(self.max_bytes)),
            ));
        }
        let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(compact.as_bytes()))
            .map_err(|_| error(field, "must be an http(s) URL or base64 data"))
    }

    async fn fetch(&self, field: &'static str, raw: &str) -> Result<Vec<u8>, FetchError> {
        let mut response = self.send(field, raw, None).await?;
        if response
            .content_length()
            .is_some_and(|len| len as usize > self.max_bytes)
        {
            return Err(error(
                field,
                format!("is larger than {}", human_size(self.max_bytes)),
            ));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| error(field, describe(&e)))?
        {
            if bytes.len() + chunk.len() > self.max_bytes {
                return Err(error(
                    field,
                    format!("is larger than {}", human_size(self.max_bytes)),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// GETs an http(s) URL through the guarded client: the URL's own host is
    /// checked here, names by the resolver, redirects by the policy. Only a
    /// success status gets through.
    async fn send(
        &self,
        field: &'static str,
        raw: &str,
        accept: Option<&'static str>,
    ) -> Result<reqwest::Response, FetchError> {
        let url = reqwest::Url::parse(raw).map_err(|_| error(field, "is not a valid URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(error(field, "must be an http(s) URL"));
        }
        if !host_allowed(&url, self.allow_private) {
            return Err(error(
                field,
                "points to a private or loopback address, which is not allowed",
            ));
        }
        let mut request = self.client.get(url);
        if let Some(accept) = accept {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        let response = request
            .send()
            .await
            .map_err(|e| error(field, describe(&e)))?;
        if !response.status().is_success() {
            return Err(error(
                field,
                format!(
                    "could not be fetched: the server answered {}",
                    response.status()
                ),
            ));
        }
        Ok(response)
    }

    /// Loads a text page (HTML, plain text, Markdown, JSON) from an http(s)
    /// URL for `field`, with the SSRF guard of [`Fetcher::load`]. Other
    /// content types are refused before their body is read. At most
    /// `max_bytes` of the body are read: a longer page is cut there and
    /// marked `truncated`, since its start is still worth reading.
    pub async fn load_page(
        &self,
        field: &'static str,
        raw: &str,
        max_bytes: usize,
    ) -> Result<Page, FetchError> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(error(field, "is required"));
        }
        let mut response = self.send(field, raw, Some(PAGE_ACCEPT)).await?;
        let final_url = response.url().to_string();
        let header = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let declared = header.as_deref().map(MediaType::parse);
        if let Some(media_type) = &declared
            && PageKind::of(&media_type.essence).is_none()
        {
            return Err(error(
                field,
                format!(
                    "is {}, which cannot be read as text (HTML, plain text, Markdown or JSON only)",
                    media_type.essence
                ),
            ));
        }
        let mut bytes = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| error(field, describe(&e)))?
        {
            let room = max_bytes - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        let (content_type, kind) = match &declared {
            Some(media_type) => (
                media_type.essence.clone(),
                PageKind::of(&media_type.essence).expect("checked above"),
            ),
            None => sniff_page(&bytes).ok_or_else(|| {
                error(
                    field,
                    "has no content type and does not look like text, so it cannot be read",
                )
            })?,
        };
        let charset = declared.as_ref().and_then(|m| m.charset.as_deref());
        let text = decode_text(&bytes, charset, kind == PageKind::Html);
        Ok(Page {
            final_url,
            content_type,
            kind,
            text,
            truncated,
        })
    }
}

/// What `load_page` asks servers for.
const PAGE_ACCEPT: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,\
                           application/json;q=0.8,text/*;q=0.5";

/// A text page as [`Fetcher::load_page`] loaded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Where the page was found, after redirects.
    pub final_url: String,
    /// The media type without parameters, lowercase (`text/html`).
    pub content_type: String,
    pub kind: PageKind,
    /// The body decoded to text: the charset of the header, else a byte
    /// order mark, else (HTML) a `<meta>` declaration, else UTF-8 when the
    /// bytes are valid UTF-8 and windows-1252 (the web's default) when not.
    pub text: String,
    /// The body was longer than the cap; `text` holds its start.
    pub truncated: bool,
}

/// The kinds of text `load_page` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    Html,
    Markdown,
    Json,
    /// Plain text and the other `text/*` types (CSV, source code...).
    Plain,
}

impl PageKind {
    fn of(essence: &str) -> Option<Self> {
        match essence {
            "text/html" | "application/xhtml+xml" => Some(Self::Html),
            "text/markdown" | "text/x-markdown" => Some(Self::Markdown),
            "application/json" | "text/json" => Some(Self::Json),
            json if json.starts_with("application/") && json.ends_with("+json") => Some(Self::Json),
            text if text.starts_with("text/") => Some(Self::Plain),
            _ => None,
        }
    }
}

/// A `Content-Type` value: its essence and charset.
struct MediaType {
    essence: String,
    charset: Option<String>,
}

impl MediaType {
    fn parse(value: &str) -> Self {
        let mut parts = value.split(';');
        let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let charset = parts.find_map(|param| {
            let (name, value) = param.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("charset")
                .then(|| value.trim().trim_matches('"').to_owned())
        });
        Self { essence, charset }
    }
}

/// The kind of a body served without a content type: HTML if it starts like
/// a document, plain text if it holds no NUL in its first kilobyte.
fn sniff_page(bytes: &[u8]) -> Option<(String, PageKind)> {
    let head = &bytes[..bytes.len().min(1024)];
    if head.contains(&0) {
        return None;
    }
    let start = String::from_utf8_lossy(head)
        .trim_start()
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        Some(("text/html".to_owned(), PageKind::Html))
    } else {
        Some(("text/plain".to_owned(), PageKind::Plain))
    }
}

fn decode_text(bytes: &[u8], charset: Option<&str>, html: bool) -> String {
    let declared = charset
        .or_else(|| html.then(|| meta_charset(bytes)).flatten())
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()));
    let (encoding, bytes) = match declared {
        Some(encoding) => (encoding, bytes),
        None => match std::str::from_utf8(bytes) {
            Ok(_) => (encoding_rs::UTF_8, bytes),
            // A page cut inside a multi-byte character: keep the whole ones.
            Err(err) if err.error_len().is_none() => {
                (encoding_rs::UTF_8, &bytes[..err.valid_up_to()])
            }
            Err(_) => (encoding_rs::WINDOWS_1252, bytes),
        },
    };
    // `decode` lets a byte order mark override the label, as browsers do.
    encoding.decode(bytes).0.into_owned()
}

/// The charset an HTML page declares in its first kilobyte
/// (`<meta charset="...">` or `<meta http-equiv ... content="...; charset=...">`).
fn meta_charset(bytes: &[u8]) -> Option<&str> {
    let head = &bytes[..bytes.len().min(1024)];
    let lower = head.to_ascii_lowercase();
    let at = lower.windows(8).position(|w| w == b"charset=")? + 8;
    let rest = &head[at..];
    let rest = rest
        .strip_prefix(b"\"")
        .or(rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.')))
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end])
        .ok()
        .filter(|l| !l.is_empty())
}

fn describe(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        "could not be fetched: the request timed out".into()
    } else if err.is_redirect() {
        "could not be fetched: redirect refused (too many, or to a private address)".into()
    } else if err.is_connect() {
        // The resolver's refusal surfaces as a connect error.
        let text = format!("{err:?}");
        if text.contains("no public address") {
            "points to a private or loopback address, which is not allowed".into()
        } else {
            "could not be fetched: connection failed".into()
        }
    } else {
        "could not be fetched".into()
    }
}

fn human_size(bytes: usize) -> String {
    // Below a megabyte (a test's or a small deployment's limit), "0 MB" would say nothing.
    match bytes {
        b if b >= 1024 * 1024 => format!("{} MB", b / (1024 * 1024)),
        b if b >= 1024 => format!("{} KB", b / 1024),
        b => format!("{b} bytes"),
    }
}

/// Recognises the formats a kind accepts by their magic bytes.
pub fn sniff(bytes: &[u8], kind: MediaKind) -> Option<&'static str> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    let ftyp = bytes.len() > 12 && &bytes[4..8] == b"ftyp";
    let riff = |form: &[u8]| bytes.len() > 12 && starts(b"RIFF") && &bytes[8..12] == form;
    let ebml = starts(&[0x1a, 0x45, 0xdf, 0xa3]);
    match kind {
        MediaKind::Image if starts(b"\x89PNG\r\n\x1a\n") => Some("png"),
        MediaKind::Image if starts(&[0xff, 0xd8, 0xff]) => Some("jpg"),
        MediaKind::Image if riff(b"WEBP") => Some("webp"),
        MediaKind::Audio if riff(b"WAVE") => Some("wav"),
        MediaKind::Audio if starts(b"fLaC") => Some("flac"),
        MediaKind::Audio if starts(b"OggS") => Some("ogg"),
        MediaKind::Audio
            if starts(b"ID3")
                || (bytes.len() > 2 && bytes[0] == 0xff && bytes[1] & 0xe0 == 0xe0) =>
        {
            Some("mp3")
        }
        MediaKind::Audio if ftyp => Some("m4a"),
        MediaKind::Audio if ebml => Some("webm"),
        MediaKind::Video if ftyp && &bytes[8..10] == b"qt" => Some("mov"),
        MediaKind::Video if ftyp => Some("mp4"),
        MediaKind::Video if ebml => Some("webm"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn fetcher(allow_private: bool) -> Fetcher {
        Fetcher::new(&FetchSettings {
            max_bytes: 1024,
            timeout_seconds: 5,
            allow_private_addresses: allow_private,
        })
    }

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["::1", "fd00::1", "fe80::1", "::ffff:127.0.0.1", "::"] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        // IPv4 carried in IPv6, and the ranges the review found missing.
        for ip in [
            "64:ff9b::7f00:1",   // NAT64 of 127.0.0.1
            "64:ff9b::a00:1",    // NAT64 of 10.0.0.1
            "64:ff9b:1::1",      // NAT64 local use
            "2002:7f00:1::1",    // 6to4 of 127.0.0.1
            "2002:a9fe:a9fe::1", // 6to4 of 169.254.169.254
            "::127.0.0.1",       // IPv4-compatible
            "::10.0.0.1",
            "fec0::1",                              // site local
            "2001:0:4136:e378:8000:63bf:3fff:fdd2", // Teredo
            "192.0.0.1",
            "192.0.0.170",
            "192.88.99.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        // The same encodings of a public address are public.
        for ip in [
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "::ffff:93.184.216.34",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        assert!(is_public(IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34))));
        assert!(is_public(IpAddr::V6(
            "2606:4700::1111".parse::<Ipv6Addr>().unwrap()
        )));
    }

    #[tokio::test]
    async fn loopback_urls_are_refused_unless_allowed() {
        let err = fetcher(false)
            .load("image", "http://127.0.0.1:9/x.png", MediaKind::Image)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "image points to a private or loopback address, which is not allowed"
        );
        let err = fetcher(false)
            .load("image", "http://localhost:9/x.png", MediaKind::Image)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "image points to a private or loopback address, which is not allowed"
        );
        // Allowed: it gets as far as connecting (nothing listens on port 9).
        let err = fetcher(true)
            .load("image", "http://127.0.0.1:9/x.png", MediaKind::Image)
            .await
            .unwrap_err();
        assert!(err.reason.starts_with("could not be fetched"), "{err}");
    }

    #[tokio::test]
    async fn base64_inputs_are_decoded_and_checked_for_their_format() {
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n\x1a\nrest");
        let media = fetcher(false)
            .load("image", &png, MediaKind::Image)
            .await
            .unwrap();
        assert_eq!(media.extension, "png");
        let uri = format!("data:image/png;base64,{png}");
        assert_eq!(
            fetcher(false)
                .load("mask", &uri, MediaKind::Image)
                .await
                .unwrap()
                .extension,
            "png"
        );
        let text = base64::engine::general_purpose::STANDARD.encode(b"hello world");
        let err = fetcher(false)
            .load("image", &text, MediaKind::Image)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "image is not a JPEG, PNG or WebP image");
        let err = fetcher(false)
            .load("file", "not base64 !!", MediaKind::Audio)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "file must be an http(s) URL or base64 data"
        );
        let err = fetcher(false)
            .load("file", "ftp://example.com/a.mp3", MediaKind::Audio)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "file must be an http(s) URL or base64 data"
        );
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 4096]);
        let err = fetcher(false)
            .load("file", &big, MediaKind::Audio)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "file is larger than 1 KB");
    }

    #[test]
    fn page_text_is_decoded_by_header_meta_bom_or_content() {
        let latin = b"<html><head><meta charset=\"iso-8859-1\"></head>caf\xe9</html>";
        assert!(decode_text(latin, None, true).contains("caf\u{e9}"));
        let equiv = b"<meta http-equiv=Content-Type content='text/html; charset=windows-1251'>\xcf";
        assert_eq!(meta_charset(equiv), Some("windows-1251"));
        assert!(decode_text(equiv, None, true).ends_with('\u{41f}'));
        // The header wins over the page; a BOM wins over both.
        assert_eq!(decode_text(b"caf\xe9", Some("latin1"), false), "caf\u{e9}");
        assert_eq!(decode_text(b"\xef\xbb\xbfok", Some("latin1"), false), "ok");
        // Undeclared: UTF-8 when valid (even cut mid-character), else windows-1252.
        assert_eq!(decode_text("é€".as_bytes(), None, false), "é€");
        assert_eq!(decode_text(&"é€".as_bytes()[..4], None, false), "é");
        assert_eq!(
            decode_text(b"\x93quoted\x94", None, false),
            "\u{201c}quoted\u{201d}"
        );
    }

    #[test]
    fn pages_without_a_content_type_are_sniffed() {
        assert_eq!(
            sniff_page(b"  <!DOCTYPE html><p>x"),
            Some(("text/html".to_owned(), PageKind::Html))
        );
        assert_eq!(
            sniff_page(b"plain words"),
            Some(("text/plain".to_owned(), PageKind::Plain))
        );
        assert_eq!(sniff_page(b"\x89PNG\r\n\x1a\n\0\0"), None);
        assert_eq!(PageKind::of("application/ld+json"), Some(PageKind::Json));
        assert_eq!(PageKind::of("text/csv"), Some(PageKind::Plain));
        assert_eq!(PageKind::of("application/pdf"), None);
        let media = MediaType::parse("Text/HTML; Charset=\"UTF-8\"");
        assert_eq!(
            (media.essence.as_str(), media.charset.as_deref()),
            ("text/html", Some("UTF-8"))
        );
    }

    #[test]
    fn magic_bytes_identify_formats() {
        assert_eq!(
            sniff(b"RIFF\0\0\0\0WAVEfmt ", MediaKind::Audio),
            Some("wav")
        );
        assert_eq!(sniff(b"ID3\x04rest", MediaKind::Audio), Some("mp3"));
        assert_eq!(
            sniff(b"\0\0\0\x20ftypisom\0\0", MediaKind::Video),
            Some("mp4")
        );
        assert_eq!(
            sniff(b"\x1a\x45\xdf\xa3rest", MediaKind::Audio),
            Some("webm")
        );
        assert_eq!(sniff(b"\xff\xd8\xff\xe0", MediaKind::Image), Some("jpg"));
        assert_eq!(sniff(b"GIF89a", MediaKind::Image), None);
    }

    #[test]
    fn uploads_are_checked_like_loaded_media() {
        let f = fetcher(false);
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\0".to_vec();
        assert_eq!(
            f.accept("image", png, MediaKind::Image).unwrap().extension,
            "png"
        );
        let err = f
            .accept("image", b"GIF89a".to_vec(), MediaKind::Image)
            .unwrap_err();
        assert_eq!(err.to_string(), "image is not a JPEG, PNG or WebP image");
        let err = f
            .accept("mask", vec![0xff; 2048], MediaKind::Image)
            .unwrap_err();
        assert_eq!(
            (err.field, err.reason.as_str()),
            ("mask", "is larger than 1 KB")
        );
        assert_eq!(human_size(25 * 1024 * 1024), "25 MB");
        assert_eq!(
            f.accept("file", Vec::new(), MediaKind::Audio)
                .unwrap_err()
                .to_string(),
            "file is required"
        );
    }
}
