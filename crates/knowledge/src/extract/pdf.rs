//! PDF text with bounded decompression.
//!
//! lopdf inflates a stream whenever it is asked for its content, without a
//! cap: a few kilobytes of FlateDecode can expand to gigabytes and the
//! out-of-memory kill takes the whole worker down. Here lopdf never decodes a
//! stream on its own. Every stream is decoded once, by [`decode_stream`], which
//! mirrors lopdf's filters (FlateDecode with its raw-deflate fallback,
//! LZWDecode, ASCII85Decode and the PNG predictors) and charges each byte it
//! produces to a budget; the decoded bytes replace the stream's content (the
//! filters removed), so pdf-extract only copies plain content.
//!
//! lopdf still decodes by itself in three places, each handled here:
//! - cross-reference streams, while the file is parsed: [`prescan`] measures
//!   every stream in the raw bytes first (per stream and in total);
//! - object streams, while the file is loaded: a load filter renames their
//!   type so lopdf keeps them packed, and they are unpacked here after
//!   bounded decoding;
//! - encrypted files, which lopdf loads and decrypts in one step with no
//!   filter: the `/Encrypt` key is hidden from the loader (same length, so
//!   offsets hold), and the objects are decrypted here, before decoding.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use flate2::read::{DeflateDecoder, ZlibDecoder};
use pdf_extract::content::Content;
use pdf_extract::encryption::decrypt_object;
use pdf_extract::filters::png::decode_frame;
use pdf_extract::{
    Dictionary, Document, EncryptionState, LoadOptions, Object, ObjectId, ObjectStream,
    PlainTextOutput, Stream,
};

use crate::format::{ExtractError, KnowledgeFormat, MAX_PDF_DECODED_BYTES, MAX_TEXT_BYTES, brief};

/// What the raw-bytes scan may inflate in total, streams that are never kept
/// (images) included: it bounds the scan's time, not memory (it keeps one
/// stream at a time).
const MAX_PRESCAN_BYTES: usize = 16 * MAX_PDF_DECODED_BYTES;
/// What one stream may decode to in the raw-bytes scan: an image, which is
/// measured there but never kept, may be larger than the kept total.
const MAX_PRESCAN_STREAM_BYTES: usize = 2 * MAX_PDF_DECODED_BYTES;

/// The type given to object streams during loading, so lopdf keeps them packed.
const PACKED_OBJECT_STREAM: &[u8] = b"UnigenPackedObjStm";
/// `/Encrypt` hidden from the loader: the same length as the name it replaces
/// (padded with `_`), so every offset in the file stays right.
const HIDDEN_ENCRYPT: &[u8] = b"Xncrypt";

/// A PDF that expands beyond the caps.
#[derive(Debug)]
pub(super) struct TooLarge;

fn too_large() -> ExtractError {
    ExtractError::TooLarge {
        what: "the PDF's uncompressed content",
        limit_bytes: MAX_PDF_DECODED_BYTES,
    }
}

/// Bytes a decoder may still produce.
struct Budget {
    remaining: usize,
}

impl Budget {
    fn new(bytes: usize) -> Self {
        Self { remaining: bytes }
    }

    fn charge(&mut self, bytes: usize) -> Result<(), TooLarge> {
        self.remaining = self.remaining.checked_sub(bytes).ok_or(TooLarge)?;
        Ok(())
    }

    /// How many bytes a reader may yield: one more than the budget, so that
    /// going over shows.
    fn read_cap(&self) -> u64 {
        u64::try_from(self.remaining)
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }
}

/// The text of a PDF (not yet normalised), every stream decoded within
/// [`MAX_PDF_DECODED_BYTES`].
pub(super) fn extract(bytes: &[u8]) -> Result<String, ExtractError> {
    prescan(bytes).map_err(|TooLarge| too_large())?;
    let hidden = hide_encryption(bytes);
    let options = LoadOptions {
        filter: Some(keep_object_streams_packed),
        ..LoadOptions::default()
    };
    let mut doc = Document::load_mem_with_options(hidden.as_deref().unwrap_or(bytes), options)
        .map_err(|err| load_failed(bytes, &err))?;
    if hidden.is_some() {
        decrypt(&mut doc)?;
    }
    let mut budget = Budget::new(MAX_PDF_DECODED_BYTES);
    decode_all(&mut doc, &mut budget).map_err(|TooLarge| too_large())?;
    unpack_object_streams(&mut doc);
    check_page_contents(&doc).map_err(|TooLarge| too_large())?;
    check_form_nesting(&doc)?;

    let mut text = LimitedText::default();
    let outcome = {
        let mut writer: &mut dyn Write = &mut text;
        let mut output = PlainTextOutput::new(&mut writer as &mut dyn Write);
        pdf_extract::output_doc(&doc, &mut output)
    };
    match outcome {
        Ok(()) => String::from_utf8(text.bytes).map_err(|_| ExtractError::Corrupt {
            format: KnowledgeFormat::Pdf,
            reason: "its text is not valid UTF-8".to_owned(),
        }),
        Err(_) if text.over => Err(ExtractError::TooLarge {
            what: "the extracted text",
            limit_bytes: MAX_TEXT_BYTES,
        }),
        Err(err) => Err(ExtractError::Corrupt {
            format: KnowledgeFormat::Pdf,
            reason: format!("it is damaged or not a valid PDF ({})", brief(&err)),
        }),
    }
}

fn load_failed(bytes: &[u8], err: &pdf_extract::Error) -> ExtractError {
    if super::is_encrypted_pdf(bytes) {
        return ExtractError::Encrypted(KnowledgeFormat::Pdf);
    }
    ExtractError::Corrupt {
        format: KnowledgeFormat::Pdf,
        reason: format!("it is damaged or not a valid PDF ({})", brief(err)),
    }
}

/// The text pdf-extract writes, cut off past [`MAX_TEXT_BYTES`]: pages can
/// share one content stream, so the text can outgrow the decoded content.
#[derive(Default)]
struct LimitedText {
    bytes: Vec<u8>,
    over: bool,
}

impl Write for LimitedText {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_TEXT_BYTES {
            self.over = true;
            return Err(io::Error::other("text limit reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The load filter: object streams keep a type lopdf does not unpack.
fn keep_object_streams_packed(id: ObjectId, object: &mut Object) -> Option<(ObjectId, Object)> {
    match object {
        Object::Stream(stream) => {
            if stream.dict.has_type(b"ObjStm") {
                stream
                    .dict
                    .set("Type", Object::Name(PACKED_OBJECT_STREAM.to_vec()));
            }
            // lopdf keeps the object it passed in; only objects unpacked from
            // object streams use the returned one, and those are never streams.
            Some((id, Object::Null))
        }
        other => Some((id, other.clone())),
    }
}

/// A copy of the file in which every name token spelling `Encrypt` (escapes
/// decoded) is renamed, so lopdf loads an encrypted file like a plain one;
/// `None` when there is none.
fn hide_encryption(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut copy: Option<Vec<u8>> = None;
    let mut at = 0;
    while let Some(offset) = bytes[at..].iter().position(|&b| b == b'/') {
        let start = at + offset;
        let end = bytes[start + 1..]
            .iter()
            .position(|&b| is_delimiter(b))
            .map_or(bytes.len(), |n| start + 1 + n);
        if decode_name(&bytes[start + 1..end]) == b"Encrypt" {
            let copy = copy.get_or_insert_with(|| bytes.to_vec());
            let token = &mut copy[start + 1..end];
            token.fill(b'_');
            token[..HIDDEN_ENCRYPT.len()].copy_from_slice(HIDDEN_ENCRYPT);
        }
        at = end.max(start + 1);
    }
    copy
}

fn is_delimiter(byte: u8) -> bool {
    byte.is_ascii_whitespace()
        || byte == 0
        || matches!(
            byte,
            b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
        )
}

/// A name's bytes with `#xx` escapes decoded.
fn decode_name(raw: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) if raw[i] == b'#' => {
                name.push(byte);
                i += 3;
            }
            _ => {
                name.push(raw[i]);
                i += 1;
            }
        }
    }
    name
}

/// Decrypts every object of a file loaded with its `/Encrypt` hidden, as
/// lopdf's own loader does (an object that fails to decrypt is kept as it
/// is), when the user password is empty.
fn decrypt(doc: &mut Document) -> Result<(), ExtractError> {
    let hidden_key = doc
        .trailer
        .iter()
        .map(|(key, _)| key)
        .find(|key| key.starts_with(HIDDEN_ENCRYPT))
        .cloned();
    // The name was elsewhere (a content stream, a string): the file is not encrypted.
    let Some(hidden_key) = hidden_key else {
        return Ok(());
    };
    let Some(reference) = doc.trailer.remove(&hidden_key) else {
        return Ok(());
    };
    doc.trailer.set("Encrypt", reference.clone());
    let encrypted = ExtractError::Encrypted(KnowledgeFormat::Pdf);
    doc.authenticate_password("").map_err(|_| encrypted)?;
    let state = EncryptionState::decode(&*doc, "")
        .map_err(|_| ExtractError::Encrypted(KnowledgeFormat::Pdf))?;
    let dictionary_id = reference.as_reference().ok();
    for (&id, object) in doc.objects.iter_mut() {
        if Some(id) != dictionary_id {
            let _ = decrypt_object(&state, id, object);
        }
    }
    doc.trailer.remove(b"Encrypt");
    if let Some(id) = dictionary_id {
        doc.objects.remove(&id);
    }
    Ok(())
}

/// Every stream decoded within `budget`, its content replaced by the result
/// (or by its raw bytes where lopdf would fail to decode it, which is what
/// pdf-extract then reads), so no filter is left for lopdf to apply. Images,
/// embedded files and metadata carry no page text and are emptied unread.
fn decode_all(doc: &mut Document, budget: &mut Budget) -> Result<(), TooLarge> {
    for object in doc.objects.values_mut() {
        let Object::Stream(stream) = object else {
            continue;
        };
        let unread = stream.dict.get(b"Subtype").and_then(Object::as_name).ok() == Some(b"Image")
            || stream.dict.has_type(b"EmbeddedFile")
            || stream.dict.has_type(b"Metadata")
            || stream.dict.has_type(b"XRef");
        if unread {
            stream.set_plain_content(Vec::new());
            continue;
        }
        if stream.filters().is_err() {
            // No filter, or one lopdf cannot read: it uses the bytes as they are.
            continue;
        }
        match decode_stream(&stream.dict, &stream.content, budget)? {
            Some(plain) => stream.set_plain_content(plain),
            None => {
                let raw = std::mem::take(&mut stream.content);
                stream.set_plain_content(raw);
            }
        }
    }
    Ok(())
}

/// The objects held in object streams, as lopdf's loader adds them: only
/// where the cross-reference table places them, never replacing an object.
fn unpack_object_streams(doc: &mut Document) {
    let mut unpacked = BTreeMap::new();
    for (&(container, _), object) in doc.objects.iter_mut() {
        let Object::Stream(stream) = object else {
            continue;
        };
        if !stream.dict.has_type(PACKED_OBJECT_STREAM) {
            continue;
        }
        stream.dict.set("Type", Object::Name(b"ObjStm".to_vec()));
        let Ok(objects) = ObjectStream::new(stream) else {
            continue;
        };
        for (id, inner) in objects.objects {
            let placed_here = match doc.reference_table.get(id.0) {
                Some(pdf_extract::xref::XrefEntry::Compressed { container: c, .. }) => {
                    *c == container
                }
                _ => true,
            };
            if placed_here {
                unpacked.entry(id).or_insert(inner);
            }
        }
    }
    for (id, object) in unpacked {
        doc.objects.entry(id).or_insert(object);
    }
}

/// A page's content is its streams concatenated, and a `/Contents` array may
/// name one stream many times: the concatenation is bounded too.
/// Most drawings of form XObjects (`Do`) the text extraction may follow in
/// one file, nested drawings included.
const MAX_FORM_DRAWINGS: u64 = 100_000;

/// pdf-extract draws a form XObject (`Do`) by recursing into it with no
/// cycle check: a form that draws itself (directly or through others)
/// overflows the stack, which aborts the whole worker; forms that draw each
/// other many times over take unbounded time. Both are refused here, before
/// extraction. A form without its own resources uses its caller's: it is
/// taken to reach every XObject of every resources dictionary naming it.
fn check_form_nesting(doc: &Document) -> Result<(), ExtractError> {
    let refused = |reason: &str| ExtractError::Corrupt {
        format: KnowledgeFormat::Pdf,
        reason: reason.to_owned(),
    };
    let forms: BTreeMap<ObjectId, &Stream> = doc
        .objects
        .iter()
        .filter_map(|(id, object)| Some((*id, object.as_stream().ok()?)))
        .filter(|(_, stream)| {
            stream.dict.get(b"Subtype").and_then(Object::as_name).ok() == Some(b"Form".as_slice())
        })
        .collect();
    // Every resources dictionary's XObjects, and the forms it names.
    let mut named_by: BTreeMap<ObjectId, Vec<usize>> = BTreeMap::new();
    let mut all_resources: Vec<Vec<ObjectId>> = Vec::new();
    for object in doc.objects.values() {
        let dict = match object {
            Object::Dictionary(dict) => dict,
            Object::Stream(stream) => &stream.dict,
            _ => continue,
        };
        if let Ok(resources) = dict.get(b"Resources") {
            all_resources.push(xobjects(doc, resources));
        }
    }
    for (index, xobjects) in all_resources.iter().enumerate() {
        for id in xobjects {
            named_by.entry(*id).or_default().push(index);
        }
    }
    let edges = |form: &Stream, id: ObjectId| -> Vec<ObjectId> {
        let targets = match form.dict.get(b"Resources") {
            Ok(resources) => xobjects(doc, resources),
            Err(_) => named_by
                .get(&id)
                .into_iter()
                .flatten()
                .flat_map(|&index| all_resources[index].iter().copied())
                .collect(),
        };
        targets
            .into_iter()
            .filter(|t| forms.contains_key(t))
            .collect()
    };
    // Drawings one `Do` of each form causes, itself included (memoised
    // depth-first walk; a form met again on the walk's path is a loop).
    let mut drawings: BTreeMap<ObjectId, u64> = BTreeMap::new();
    let mut on_path: Vec<ObjectId> = Vec::new();
    let mut stack: Vec<(ObjectId, bool)> = forms.keys().map(|id| (*id, false)).collect();
    while let Some((id, children_done)) = stack.pop() {
        if drawings.contains_key(&id) {
            continue;
        }
        let targets = edges(forms[&id], id);
        if children_done {
            on_path.retain(|p| *p != id);
            let deepest = targets.iter().map(|t| drawings[t]).max().unwrap_or(0);
            let total = 1 + count_drawings(&forms[&id].content).saturating_mul(deepest);
            if total > MAX_FORM_DRAWINGS {
                return Err(refused("its drawings are nested too many times over"));
            }
            drawings.insert(id, total);
            continue;
        }
        if on_path.contains(&id) {
            return Err(refused("its drawings are nested in a loop"));
        }
        on_path.push(id);
        stack.push((id, true));
        for target in targets {
            if on_path.contains(&target) {
                return Err(refused("its drawings are nested in a loop"));
            }
            if !drawings.contains_key(&target) {
                stack.push((target, false));
            }
        }
    }
    let deepest = drawings.values().copied().max().unwrap_or(0);
    let mut total = 0u64;
    for page in doc.get_pages().into_values() {
        let content = doc.get_page_content(page).unwrap_or_default();
        total = total.saturating_add(count_drawings(&content).saturating_mul(deepest));
    }
    if total > MAX_FORM_DRAWINGS {
        return Err(refused("its drawings are nested too many times over"));
    }
    Ok(())
}

/// The object ids of the XObjects a resources dictionary (or a reference
/// to one) names.
fn xobjects(doc: &Document, resources: &Object) -> Vec<ObjectId> {
    let resolve = |object: &Object| match object {
        Object::Reference(id) => doc.get_object(*id).ok().cloned(),
        other => Some(other.clone()),
    };
    let Some(Object::Dictionary(resources)) = resolve(resources) else {
        return Vec::new();
    };
    let Some(Object::Dictionary(xobjects)) = resources.get(b"XObject").ok().and_then(resolve)
    else {
        return Vec::new();
    };
    xobjects
        .iter()
        .filter_map(|(_, value)| value.as_reference().ok())
        .collect()
}

/// `Do` operators in a content stream (0 when it does not parse: then
/// pdf-extract does not draw it either).
fn count_drawings(content: &[u8]) -> u64 {
    Content::decode(content).map_or(0, |content| {
        content
            .operations
            .iter()
            .filter(|op| op.operator == "Do")
            .count() as u64
    })
}

fn check_page_contents(doc: &Document) -> Result<(), TooLarge> {
    for page in doc.get_pages().into_values() {
        let mut budget = Budget::new(MAX_PDF_DECODED_BYTES);
        for id in doc.get_page_contents(page) {
            if let Ok(stream) = doc.get_object(id).and_then(Object::as_stream) {
                budget.charge(stream.content.len() + 1)?;
            }
        }
    }
    Ok(())
}

/// Measures every stream in the raw file the way lopdf would decode it, so
/// the streams lopdf decodes while parsing (cross-reference streams) are
/// bounded too: each stream within [`MAX_PRESCAN_STREAM_BYTES`], all of them
/// within [`MAX_PRESCAN_BYTES`]. The dictionary before each `stream` keyword
/// is read with lopdf's own parser; the data is taken to the end of the file
/// (decoders stop at their own end), which measures at least what lopdf reads.
pub(super) fn prescan(bytes: &[u8]) -> Result<(), TooLarge> {
    let mut total = Budget::new(MAX_PRESCAN_BYTES);
    for keyword in find_all(bytes, b"stream") {
        if bytes[..keyword].ends_with(b"end") {
            continue;
        }
        let Some(data_start) = stream_data_start(bytes, keyword + b"stream".len()) else {
            continue;
        };
        let data = &bytes[data_start..];
        let dict = stream_dictionary(bytes, keyword);
        let mut budget = Budget::new(MAX_PRESCAN_STREAM_BYTES.min(total.remaining));
        let before = budget.remaining;
        match &dict {
            Some(dict) if Stream::new(dict.clone(), Vec::new()).filters().is_ok() => {
                decode_stream(dict, data, &mut budget)?;
            }
            // A dictionary that cannot be read here is measured as FlateDecode.
            None => {
                inflate(data, &mut budget)?;
            }
            Some(_) => {}
        }
        total.charge(before - budget.remaining)?;
    }
    Ok(())
}

fn find_all<'a>(haystack: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(move |(_, window)| *window == needle)
        .map(|(at, _)| at)
}

/// Where a stream's data starts after its keyword: past spaces and one end of line.
fn stream_data_start(bytes: &[u8], mut at: usize) -> Option<usize> {
    while matches!(bytes.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    match (bytes.get(at), bytes.get(at + 1)) {
        (Some(b'\r'), Some(b'\n')) => Some(at + 2),
        (Some(b'\r' | b'\n'), _) => Some(at + 1),
        _ => None,
    }
}

/// The dictionary written before a `stream` keyword: from the last `obj`
/// keyword before it (not an `endobj`), parsed as lopdf parses operands.
fn stream_dictionary(bytes: &[u8], keyword: usize) -> Option<Dictionary> {
    const MAX_DICTIONARY_BYTES: usize = 1 << 20;
    let window_start = keyword.saturating_sub(MAX_DICTIONARY_BYTES);
    let before = &bytes[window_start..keyword];
    let obj = before
        .windows(3)
        .enumerate()
        .rev()
        .find(|(at, w)| *w == b"obj" && !before[..*at].ends_with(b"end"))
        .map(|(at, _)| at + 3)?;
    let mut source = before[obj..].to_vec();
    source.extend_from_slice(b" stream");
    let content = Content::decode(&source).ok()?;
    let operation = content.operations.last()?;
    if operation.operator != "stream" {
        return None;
    }
    operation.operands.last()?.as_dict().ok().cloned()
}

/// A stream's data decoded as lopdf's `Stream::decompressed_content` decodes
/// it, every byte produced charged to `budget`. `None` where lopdf fails (a
/// filter it does not implement, a damaged predictor row): it then uses the
/// raw bytes.
fn decode_stream(
    dict: &Dictionary,
    raw: &[u8],
    budget: &mut Budget,
) -> Result<Option<Vec<u8>>, TooLarge> {
    let stream = Stream::new(dict.clone(), Vec::new());
    let Ok(filters) = stream.filters() else {
        return Ok(Some(raw.to_vec()));
    };
    let params = dict.get(b"DecodeParms").and_then(Object::as_dict).ok();
    let mut data: Option<Vec<u8>> = None;
    for filter in filters {
        let input = data.as_deref().unwrap_or(raw);
        let decoded = match filter {
            b"FlateDecode" => predict(inflate(input, budget)?, params, budget)?,
            b"LZWDecode" => predict(lzw(input, params, budget)?, params, budget)?,
            b"ASCII85Decode" => ascii85(input, budget)?,
            _ => None,
        };
        match decoded {
            Some(decoded) => data = Some(decoded),
            None => return Ok(None),
        }
    }
    Ok(Some(data.unwrap_or_else(|| raw.to_vec())))
}

/// zlib, and raw deflate after the two header bytes when zlib fails with
/// nothing decoded (lopdf's fallback for damaged checksums).
fn inflate(input: &[u8], budget: &mut Budget) -> Result<Vec<u8>, TooLarge> {
    let mut output = Vec::new();
    if input.is_empty() {
        return Ok(output);
    }
    let result = ZlibDecoder::new(input)
        .take(budget.read_cap())
        .read_to_end(&mut output);
    budget.charge(output.len())?;
    if result.is_err() && output.is_empty() && input.len() > 2 {
        let _ = DeflateDecoder::new(&input[2..])
            .take(budget.read_cap())
            .read_to_end(&mut output);
        budget.charge(output.len())?;
    }
    Ok(output)
}

fn lzw(
    input: &[u8],
    params: Option<&Dictionary>,
    budget: &mut Budget,
) -> Result<Vec<u8>, TooLarge> {
    use weezl::{BitOrder, decode::Decoder};
    const MIN_BITS: u8 = 9;
    let early_change = params
        .and_then(|p| p.get(b"EarlyChange").ok())
        .and_then(|p| p.as_i64().ok())
        .is_none_or(|v| v != 0);
    let mut decoder = if early_change {
        Decoder::with_tiff_size_switch(BitOrder::Msb, MIN_BITS - 1)
    } else {
        Decoder::new(BitOrder::Msb, MIN_BITS - 1)
    };
    let mut output = CappedWriter {
        bytes: Vec::new(),
        cap: budget.remaining,
        over: false,
    };
    // A decoding error keeps what was decoded, as lopdf does.
    let _ = decoder.into_stream(&mut output).decode_all(input);
    if output.over {
        return Err(TooLarge);
    }
    budget.charge(output.bytes.len())?;
    Ok(output.bytes)
}

struct CappedWriter {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.over = true;
            return Err(io::Error::other("decoded size limit reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// ASCII85 yields at most four bytes per input byte (`z`); that bound is
/// charged up front, then lopdf decodes.
fn ascii85(input: &[u8], budget: &mut Budget) -> Result<Option<Vec<u8>>, TooLarge> {
    budget.charge(input.len().saturating_mul(4))?;
    let mut dict = Dictionary::new();
    dict.set("Filter", Object::Name(b"ASCII85Decode".to_vec()));
    Ok(Stream::new(dict, input.to_vec())
        .decompressed_content()
        .ok())
}

/// lopdf's PNG predictors (10 to 15). lopdf allocates two rows of the
/// declared width before reading any data, so a row wider than the data
/// (which lopdf would refuse after allocating) is refused first.
fn predict(
    data: Vec<u8>,
    params: Option<&Dictionary>,
    budget: &mut Budget,
) -> Result<Option<Vec<u8>>, TooLarge> {
    let Some(params) = params else {
        return Ok(Some(data));
    };
    let number =
        |key: &[u8], default: i64| params.get(key).and_then(Object::as_i64).unwrap_or(default);
    if !(10..=15).contains(&number(b"Predictor", 1)) {
        return Ok(Some(data));
    }
    let as_size = |value: i64| usize::try_from(value).ok();
    let (Some(columns), Some(colors), Some(bits)) = (
        as_size(number(b"Columns", 1).max(1)),
        as_size(number(b"Colors", 1).max(1)),
        as_size(number(b"BitsPerComponent", 8).max(8)),
    ) else {
        return Ok(None);
    };
    let Some(bytes_per_pixel) = colors.checked_mul(bits).map(|b| b / 8) else {
        return Ok(None);
    };
    let Some(bytes_per_row) = bytes_per_pixel.checked_mul(columns) else {
        return Ok(None);
    };
    if data.is_empty() {
        return Ok(Some(data));
    }
    if bytes_per_row >= data.len() {
        return Ok(None);
    }
    budget.charge(2 * bytes_per_row)?;
    Ok(decode_frame(&data, bytes_per_pixel, columns).ok())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use flate2::Compression;
    use flate2::write::ZlibEncoder;

    use super::*;
    use crate::extract::extract_text;

    /// `len` zero bytes, zlib-compressed in chunks (the test never holds them).
    fn zlib_zeros(len: usize) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
        let chunk = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            encoder.write_all(&chunk[..n]).expect("compresses");
            left -= n;
        }
        encoder.finish().expect("finishes")
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(data).expect("compresses");
        encoder.finish().expect("finishes")
    }

    /// A one-page PDF (Helvetica as /F1) whose page `/Contents` is `contents`
    /// and whose further objects, numbered from 5, are `streams`
    /// (`(extra dictionary entries, data)`), written as FlateDecode streams.
    fn pdf(contents: &str, streams: &[(&str, Vec<u8>)]) -> Vec<u8> {
        pdf_with_resources("/Font << /F1 4 0 R >>", contents, streams)
    }

    /// [`pdf`] with the page's resources dictionary entries given.
    fn pdf_with_resources(resources: &str, contents: &str, streams: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut objects: Vec<Vec<u8>> = vec![
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
                 /Resources << {resources} >> /Contents {contents} >>"
            )
            .into_bytes(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        ];
        for (extra, data) in streams {
            let mut object = format!(
                "<< /Length {} /Filter /FlateDecode {extra} >>\nstream\n",
                data.len()
            )
            .into_bytes();
            object.extend_from_slice(data);
            object.extend_from_slice(b"\nendstream");
            objects.push(object);
        }
        let mut out = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (number, body) in objects.iter().enumerate() {
            offsets.push(out.len());
            out.extend_from_slice(format!("{} 0 obj\n", number + 1).as_bytes());
            out.extend_from_slice(body);
            out.extend_from_slice(b"\nendobj\n");
        }
        let xref_at = out.len();
        let mut xref = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
        for offset in offsets {
            xref.push_str(&format!("{offset:010} 00000 n \n"));
        }
        xref.push_str(&format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref_at}\n%%EOF\n",
            objects.len() + 1
        ));
        out.extend_from_slice(xref.as_bytes());
        out
    }

    const TEXT: &[u8] = b"BT /F1 12 Tf 72 720 Td (Hello knowledge) Tj ET";

    const FORM: &str = "/Type /XObject /Subtype /Form /BBox [0 0 612 792]";

    #[test]
    fn knowledge_pdf_forms_drawing_themselves_are_refused_not_a_stack_overflow() {
        // The page draws form X (object 6); X draws itself through its own
        // resources. pdf-extract would recurse until the stack overflows.
        let looping = pdf_with_resources(
            "/Font << /F1 4 0 R >> /XObject << /X 6 0 R >>",
            "5 0 R",
            &[
                ("", zlib(b"/X Do")),
                (
                    &format!("{FORM} /Resources << /XObject << /X 6 0 R >> >>"),
                    zlib(b"/X Do"),
                ),
            ],
        );
        let err = extract_text(KnowledgeFormat::Pdf, &looping).unwrap_err();
        assert!(err.to_string().contains("nested in a loop"), "{err}");
        // Without its own resources, X draws itself through the page's.
        let inherited = pdf_with_resources(
            "/Font << /F1 4 0 R >> /XObject << /X 6 0 R >>",
            "5 0 R",
            &[("", zlib(b"/X Do")), (FORM, zlib(b"/X Do"))],
        );
        let err = extract_text(KnowledgeFormat::Pdf, &inherited).unwrap_err();
        assert!(err.to_string().contains("nested in a loop"), "{err}");
    }

    #[test]
    fn knowledge_pdf_forms_drawn_many_times_over_are_refused_and_plain_forms_read() {
        // Forms 6..=11 each draw the next one 10 times: 10^6 drawings.
        let mut streams: Vec<(String, Vec<u8>)> = vec![(String::new(), zlib(b"/F6 Do"))];
        for form in 6..=11 {
            let next = form + 1;
            streams.push((
                format!("{FORM} /Resources << /XObject << /F{next} {next} 0 R >> >>"),
                zlib(format!("/F{next} Do ").repeat(10).as_bytes()),
            ));
        }
        streams.push((
            format!("{FORM} /Resources << /Font << /F1 4 0 R >> >>"),
            zlib(TEXT),
        ));
        let streams: Vec<(&str, Vec<u8>)> = streams
            .iter()
            .map(|(d, c)| (d.as_str(), c.clone()))
            .collect();
        let bytes = pdf_with_resources(
            "/Font << /F1 4 0 R >> /XObject << /F6 6 0 R >>",
            "5 0 R",
            &streams,
        );
        let err = extract_text(KnowledgeFormat::Pdf, &bytes).unwrap_err();
        assert!(err.to_string().contains("too many times over"), "{err}");
        // One form drawn once reads as its text.
        let plain = pdf_with_resources(
            "/Font << /F1 4 0 R >> /XObject << /X 6 0 R >>",
            "5 0 R",
            &[
                ("", zlib(b"/X Do")),
                (
                    &format!("{FORM} /Resources << /Font << /F1 4 0 R >> >>"),
                    zlib(TEXT),
                ),
            ],
        );
        assert_eq!(
            extract_text(KnowledgeFormat::Pdf, &plain).expect("extracts"),
            "Hello knowledge"
        );
    }

    #[test]
    fn knowledge_pdf_compressed_content_is_extracted() {
        let bytes = pdf("5 0 R", &[("", zlib(TEXT))]);
        assert_eq!(
            extract_text(KnowledgeFormat::Pdf, &bytes).expect("extracts"),
            "Hello knowledge"
        );
    }

    #[test]
    fn knowledge_pdf_flate_bomb_is_too_large_and_never_inflated() {
        // 1 GiB of zeros in about a megabyte. Before bounded inflation lopdf
        // inflated all of it (and the text came out empty).
        let bytes = pdf("5 0 R", &[("", zlib_zeros(1 << 30))]);
        assert!(bytes.len() < 2 << 20, "{} bytes", bytes.len());
        let started = Instant::now();
        let err = extract_text(KnowledgeFormat::Pdf, &bytes).unwrap_err();
        assert!(matches!(err, ExtractError::TooLarge { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "the PDF's uncompressed content is too large: the limit is 128 MB"
        );
        assert!(!err.is_retryable());
        assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    }

    #[test]
    fn knowledge_pdf_streams_are_capped_together() {
        // Each stream is under the per-stream scan limit; together they are over the cap.
        let part = MAX_PDF_DECODED_BYTES / 2 + (1 << 20);
        let bytes = pdf(
            "[5 0 R 6 0 R]",
            &[("", zlib_zeros(part)), ("", zlib_zeros(part))],
        );
        let err = extract_text(KnowledgeFormat::Pdf, &bytes).unwrap_err();
        assert!(matches!(err, ExtractError::TooLarge { .. }), "{err:?}");
    }

    #[test]
    fn knowledge_pdf_contents_naming_one_stream_many_times_is_capped() {
        let mut big = TEXT.to_vec();
        big.resize(1 << 20, b' ');
        let repeated = vec!["5 0 R"; 200].join(" ");
        let bytes = pdf(&format!("[{repeated}]"), &[("", zlib(&big))]);
        let err = extract_text(KnowledgeFormat::Pdf, &bytes).unwrap_err();
        assert!(matches!(err, ExtractError::TooLarge { .. }), "{err:?}");
    }

    #[test]
    fn knowledge_pdf_images_are_not_inflated_for_text() {
        // An image XObject that inflates past the kept cap (but within the
        // scan's per-stream limit) is dropped unread; the text still comes out.
        let image = zlib_zeros(MAX_PDF_DECODED_BYTES + (1 << 20));
        let bytes = pdf(
            "6 0 R",
            &[
                ("/Type /XObject /Subtype /Image /Width 1 /Height 1", image),
                ("", zlib(TEXT)),
            ],
        );
        assert_eq!(
            extract_text(KnowledgeFormat::Pdf, &bytes).expect("extracts"),
            "Hello knowledge"
        );
    }

    /// `bytes` saved again by lopdf: with object streams and a
    /// cross-reference stream (`modern`), encrypted with an empty user
    /// password (RC4, 128-bit) when `encrypt`.
    fn resaved(bytes: &[u8], modern: bool, encrypt: bool) -> Vec<u8> {
        use pdf_extract::{EncryptionVersion, Permissions};
        let mut doc = Document::load_mem(bytes).expect("loads");
        if encrypt {
            doc.trailer.set(
                "ID",
                Object::Array(vec![
                    Object::string_literal(b"0123456789abcdef".to_vec()),
                    Object::string_literal(b"0123456789abcdef".to_vec()),
                ]),
            );
            let state = EncryptionState::try_from(EncryptionVersion::V2 {
                document: &doc,
                owner_password: "owner",
                user_password: "",
                key_length: 128,
                permissions: Permissions::all(),
            })
            .expect("an encryption state");
            doc.encrypt(&state).expect("encrypts");
        }
        let mut out = Vec::new();
        if modern {
            doc.save_modern(&mut out).expect("saves");
        } else {
            doc.save_to(&mut out).expect("saves");
        }
        out
    }

    #[test]
    fn knowledge_pdf_object_streams_and_empty_password_encryption_still_read() {
        let plain = pdf("5 0 R", &[("", zlib(TEXT))]);
        // (lopdf's own writer packs encrypted objects into object streams in a
        // way no reader decrypts, so that combination is left out.)
        for (modern, encrypt) in [(true, false), (false, true)] {
            let bytes = resaved(&plain, modern, encrypt);
            assert_eq!(
                hide_encryption(&bytes).is_some(),
                encrypt,
                "modern {modern}, encrypted {encrypt}"
            );
            assert_eq!(
                extract_text(KnowledgeFormat::Pdf, &bytes).expect("extracts"),
                "Hello knowledge",
                "modern {modern}, encrypted {encrypt}"
            );
        }
    }

    #[test]
    fn knowledge_pdf_flate_bomb_in_an_encrypted_file_is_too_large() {
        // Encrypted, the stream's bytes are ciphertext until decrypted: only
        // the decoding after decryption can see the bomb.
        let bomb = pdf("5 0 R", &[("", zlib_zeros(1 << 30))]);
        let bytes = resaved(&bomb, false, true);
        assert!(prescan(&bytes).is_ok(), "the raw scan sees only ciphertext");
        let err = extract_text(KnowledgeFormat::Pdf, &bytes).unwrap_err();
        assert!(matches!(err, ExtractError::TooLarge { .. }), "{err:?}");
    }

    #[test]
    fn knowledge_pdf_scan_reads_dictionaries_like_lopdf() {
        let bytes = pdf("5 0 R", &[("/DecodeParms << /Predictor 1 >>", zlib(TEXT))]);
        let keyword = find_all(&bytes, b"stream")
            .find(|&at| !bytes[..at].ends_with(b"end"))
            .expect("a stream");
        let dict = stream_dictionary(&bytes, keyword).expect("parsed");
        assert_eq!(
            dict.get(b"Filter").and_then(Object::as_name).ok(),
            Some(&b"FlateDecode"[..])
        );
        assert!(dict.get(b"DecodeParms").and_then(Object::as_dict).is_ok());
    }

    #[test]
    fn knowledge_pdf_names_decode_escapes() {
        assert_eq!(decode_name(b"Encr#79pt"), b"Encrypt");
        assert_eq!(decode_name(b"A#2"), b"A#2");
    }

    #[test]
    fn knowledge_pdf_encrypt_is_hidden_with_offsets_kept() {
        let raw = b"trailer << /Size 3 /Encr#79pt 5 0 R /Root 1 0 R >>";
        let hidden = hide_encryption(raw).expect("found");
        assert_eq!(hidden.len(), raw.len());
        assert!(
            hidden
                .windows(b"/Xncrypt__".len())
                .any(|w| w == b"/Xncrypt__")
        );
        assert!(hide_encryption(b"<< /Root 1 0 R >>").is_none());
    }

    #[test]
    fn knowledge_pdf_predictor_wider_than_its_data_is_refused_unallocated() {
        let mut params = Dictionary::new();
        params.set("Predictor", 12);
        params.set("Columns", 1_i64 << 40);
        let mut budget = Budget::new(1024);
        assert_eq!(
            predict(vec![0; 16], Some(&params), &mut budget).expect("within budget"),
            None
        );
        assert_eq!(budget.remaining, 1024);
    }
}
