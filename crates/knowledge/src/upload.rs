//! Upload-time rules of knowledge files: the plan's limits, the name kept
//! for the file, and where its bytes are stored.

use uuid::Uuid;

use super::KnowledgeFormat;
pub use unigen_core::domain::{UploadRefusal, admit_count, admit_plan, admit_size, max_file_bytes};
pub use unigen_core::storage::knowledge_storage_prefix as storage_prefix;
use unigen_core::storage::{FileStore, StorageError};
use unigen_db::models::{KnowledgeFile, NewKnowledgeFile};
use unigen_db::queries::knowledge::InsertOutcome;
use unigen_db::{DbError, PgPool, queries};
use unigen_jobs::queue::{KnowledgeMessage, Publisher};

/// Longest file name kept (characters); the rest is cut.
pub const MAX_FILENAME_CHARS: usize = 255;
/// Longest name segment of a storage key (bytes, ASCII).
const MAX_KEY_NAME: usize = 100;

/// The name shown for an upload: the last path segment of what the client
/// sent (browsers on Windows may send `C:\...\name`), control characters
/// dropped, trimmed, at most [`MAX_FILENAME_CHARS`].
pub fn display_name(raw: &str) -> String {
    let last = raw.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = last.chars().filter(|c| !c.is_control()).collect();
    clean.trim().chars().take(MAX_FILENAME_CHARS).collect()
}

/// `knowledge/<org>/<file_id>/<name>`: the name reduced to the characters
/// storage keys allow, so operators can tell files apart.
pub fn storage_key(org_id: Uuid, file_id: Uuid, filename: &str) -> String {
    let mut name: String = filename
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A segment may not start with a dot (no hidden files, no `..`).
    let trimmed = name.trim_start_matches('.');
    name = trimmed.chars().take(MAX_KEY_NAME).collect();
    if name.is_empty() {
        name = "file".into();
    }
    format!("{}/{name}", storage_prefix(org_id, file_id))
}

/// What became of an accepted upload.
#[derive(Debug)]
pub enum AcceptOutcome {
    /// Stored, recorded `pending` and (unless the broker failed: then the
    /// scheduler does it) published to the `knowledge` queue.
    Accepted(Box<KnowledgeFile>),
    /// Not an agent of the organization, or a template.
    AgentNotFound,
    Refused(UploadRefusal),
}

#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A validated upload (format detected, size within the plan).
pub struct Upload<'a> {
    pub org_id: Uuid,
    pub agent_id: Uuid,
    pub filename: &'a str,
    pub format: KnowledgeFormat,
    pub bytes: Vec<u8>,
}

/// Stores the bytes, then records the file within the plan (the bytes are
/// in place before the row commits, so a worker never finds a row without
/// them), then publishes its message with a confirm and notes the confirm.
/// A refused or failed insert removes the stored bytes again.
pub async fn accept(
    pool: &PgPool,
    store: &dyn FileStore,
    publisher: &Publisher,
    upload: Upload<'_>,
) -> Result<AcceptOutcome, AcceptError> {
    let id = Uuid::now_v7();
    let key = storage_key(upload.org_id, id, upload.filename);
    let size_bytes = upload.bytes.len() as i64;
    store.put(&key, upload.bytes).await?;
    let new = NewKnowledgeFile {
        id,
        org_id: upload.org_id,
        agent_id: upload.agent_id,
        filename: upload.filename,
        format: upload.format.as_str(),
        size_bytes,
        storage_key: &key,
    };
    let inserted = async {
        let mut conn = pool.get().await.map_err(DbError::from)?;
        queries::knowledge::insert_within_plan(&mut conn, &new).await
    }
    .await;
    let not_inserted = match inserted {
        Ok(InsertOutcome::Inserted(file)) => Ok(file),
        Ok(InsertOutcome::AgentNotFound) => Err(Ok(AcceptOutcome::AgentNotFound)),
        Ok(InsertOutcome::Refused(refusal)) => Err(Ok(AcceptOutcome::Refused(refusal))),
        Err(err) => Err(Err(AcceptError::Db(err))),
    };
    let file = match not_inserted {
        Ok(file) => file,
        Err(result) => {
            let prefix = storage_prefix(upload.org_id, id);
            if let Err(err) = store.delete_prefix(&prefix).await {
                tracing::warn!(error = %err, key = %key, "removing the bytes of a refused upload failed");
            }
            return result;
        }
    };
    let message = KnowledgeMessage {
        file_id: file.id,
        attempt: file.attempt,
    };
    match publisher.publish_knowledge(&message).await {
        Ok(()) => {
            let marked = async {
                let mut conn = pool.get().await.map_err(DbError::from)?;
                queries::knowledge::mark_enqueued(&mut conn, &[file.id]).await
            }
            .await;
            if let Err(err) = marked {
                // Harmless: the scheduler publishes it again; the claim is atomic.
                tracing::warn!(file.id = %file.id, error = %err, "recording the publish failed");
            }
        }
        Err(err) => {
            tracing::warn!(file.id = %file.id, error = %err, "publishing the knowledge file failed; the scheduler will");
        }
    }
    Ok(AcceptOutcome::Accepted(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use unigen_core::storage::validate_key;

    use unigen_core::domain::{AgentLimits, MAX_KNOWLEDGE_FILE_BYTES as MAX_FILE_BYTES};

    const MIB: usize = 1024 * 1024;
    fn limits(plan: &str, agents: i32, files: i32, mb: i32) -> AgentLimits {
        AgentLimits {
            plan: plan.into(),
            max_agents: agents,
            tools_per_agent: 4,
            max_iterations: 10,
            knowledge_files_per_agent: files,
            max_file_size_mb: mb,
        }
    }

    #[test]
    fn the_plan_bounds_the_count_and_the_size_of_files() {
        let pro = limits("Pro", 5, 5, 10);
        assert_eq!(admit_count(&pro, 4), Ok(()));
        assert_eq!(
            admit_count(&pro, 5).unwrap_err().to_string(),
            "Knowledge file limit reached: the Pro plan allows 5 knowledge files per agent"
        );
        assert_eq!(admit_size(&pro, 10 * MIB), Ok(()));
        assert_eq!(
            admit_size(&pro, 10 * MIB + 1).unwrap_err().to_string(),
            "file is too large: the Pro plan allows files up to 10 MB"
        );
        let free = limits("Free", 0, 0, 0);
        assert_eq!(
            admit_plan(&free),
            Err(UploadRefusal::NotOnPlan("Free".into()))
        );
        assert_eq!(
            admit_count(&free, 0),
            Err(UploadRefusal::NotOnPlan("Free".into()))
        );
        // CLI Team's 50 MB is what extraction accepts at most.
        assert_eq!(
            max_file_bytes(&limits("CLI Team", 50, 50, 50)),
            MAX_FILE_BYTES
        );
        assert_eq!(
            max_file_bytes(&limits("Custom", 50, 50, 500)),
            MAX_FILE_BYTES
        );
    }

    #[test]
    fn names_lose_their_paths_and_keys_are_valid_storage_keys() {
        assert_eq!(display_name("C:\\Users\\me\\notes.md"), "notes.md");
        assert_eq!(display_name("../../etc/passwd"), "passwd");
        assert_eq!(display_name(" report\u{0}.pdf "), "report.pdf");
        assert_eq!(display_name(&"é".repeat(300)).chars().count(), 255);
        let (org, file) = (Uuid::nil(), Uuid::max());
        for name in [
            "Résumé 2024 (final).docx",
            "..hidden",
            "",
            "a/b",
            &"x".repeat(500),
        ] {
            let key = storage_key(org, file, name);
            validate_key(&key).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(key.starts_with(&storage_prefix(org, file)), "{key}");
        }
        assert_eq!(
            storage_key(org, file, "Résumé 2024.docx"),
            format!("knowledge/{org}/{file}/R_sum__2024.docx")
        );
        assert_eq!(
            storage_key(org, file, "..hidden"),
            format!("knowledge/{org}/{file}/hidden")
        );
    }
}
