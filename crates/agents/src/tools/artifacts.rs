//! `generate_chart` and `create_document`: files rendered from the model's
//! arguments (see [`unigen_artifacts`]), stored under the run, and returned
//! as signed URLs.

use chrono::Utc;
use serde_json::{Value, json};

use super::kit::{Done, Failure, ToolDeps, ToolScope, blocking};
use unigen_artifacts::{
    ArtifactError, DocumentFormat, Rendered, parse_chart_spec, parse_document_spec, render_chart,
    render_document,
};

/// Longest file name stem taken from a document's title.
const MAX_STEM_CHARS: usize = 60;

pub(super) async fn generate_chart(
    deps: &ToolDeps,
    arguments: &Value,
    scope: &ToolScope<'_>,
) -> Result<Done, Failure> {
    let spec = parse_chart_spec(arguments).map_err(|err| artifact_failure("chart", err))?;
    let rendered = blocking("chart", move || render_chart(&spec))
        .await?
        .map_err(|err| artifact_failure("chart", err))?;
    let key = format!(
        "{}/{}-chart.{}",
        crate::run_storage_prefix(scope.run_id),
        scope.step_number,
        rendered.extension
    );
    let (format, mime, width, height) = (
        rendered.extension,
        rendered.mime,
        rendered.width,
        rendered.height,
    );
    let (url, bytes) = store(deps, &key, rendered).await?;
    Ok(Done::output(json!({
        "url": url,
        "format": format,
        "mime": mime,
        "width": width,
        "height": height,
        "bytes": bytes,
    })))
}

pub(super) async fn create_document(
    deps: &ToolDeps,
    arguments: &Value,
    scope: &ToolScope<'_>,
) -> Result<Done, Failure> {
    let spec = parse_document_spec(arguments).map_err(|err| artifact_failure("document", err))?;
    let format = match spec.format {
        DocumentFormat::Pdf => "pdf",
        DocumentFormat::Markdown => "markdown",
        DocumentFormat::Csv => "csv",
    };
    let stem = file_stem(&spec.title);
    let rendered = blocking("document", move || render_document(&spec))
        .await?
        .map_err(|err| artifact_failure("document", err))?;
    let filename = format!("{stem}.{}", rendered.extension);
    let key = format!(
        "{}/{}-{filename}",
        crate::run_storage_prefix(scope.run_id),
        scope.step_number
    );
    let mime = rendered.mime;
    let (url, bytes) = store(deps, &key, rendered).await?;
    Ok(Done::output(json!({
        "url": url,
        "format": format,
        "mime": mime,
        "filename": filename,
        "bytes": bytes,
    })))
}

/// Invalid arguments are the model's to fix; a renderer failure is ours
/// (logged, never shown).
fn artifact_failure(what: &str, err: ArtifactError) -> Failure {
    match err {
        ArtifactError::Invalid(message) => Failure::new(message),
        ArtifactError::Render(cause) => {
            tracing::error!(error = %cause, "{what} rendering failed");
            Failure::new(format!("the {what} could not be rendered"))
        }
    }
}

/// Stores the file; its signed URL and size.
async fn store(deps: &ToolDeps, key: &str, rendered: Rendered) -> Result<(String, usize), Failure> {
    let bytes = rendered.bytes.len();
    deps.store.put(key, rendered.bytes).await.map_err(|err| {
        tracing::error!(error = %err, key, "storing an agent artifact failed");
        Failure::new("the file could not be stored; try again later")
    })?;
    Ok((deps.signer.sign_url(key, Utc::now().timestamp()), bytes))
}

/// A file name stem from a title that storage keys accept: ASCII letters
/// and digits, words joined by `-`, lowercase, `document` if none remain.
fn file_stem(title: &str) -> String {
    let mut stem = String::new();
    for word in title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if stem.len() + word.len() + 1 > MAX_STEM_CHARS {
            break;
        }
        if !stem.is_empty() {
            stem.push('-');
        }
        stem.push_str(&word.to_ascii_lowercase());
    }
    if stem.is_empty() {
        // A title of one huge word, or of no ASCII at all.
        stem = title
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(MAX_STEM_CHARS)
            .collect::<String>()
            .to_ascii_lowercase();
    }
    if stem.is_empty() {
        "document".to_owned()
    } else {
        stem
    }
}

#[cfg(test)]
mod tests {
    use super::file_stem;

    #[test]
    fn agents_tools_file_stems_are_safe_storage_segments() {
        assert_eq!(
            file_stem("Quarterly Review: 2025/Q3!"),
            "quarterly-review-2025-q3"
        );
        assert_eq!(file_stem("../../etc/passwd"), "etc-passwd");
        assert_eq!(file_stem("Ελληνικά 日本"), "document");
        assert_eq!(file_stem(&"a".repeat(300)).len(), 60);
        let long = file_stem(&"word ".repeat(40));
        assert!(long.len() <= 60 && long.ends_with("word"), "{long}");
        for title in ["x", ".hidden", "a b", &"é".repeat(10)] {
            unigen_core::storage::validate_key(&format!("agent-runs/r/1-{}.pdf", file_stem(title)))
                .unwrap();
        }
    }
}
