//! `unigen-api` command line: serve (default), migrate, and operator commands
//! for organizations and API keys. Admin commands print JSON.

use anyhow::{Context, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Parser, Subcommand};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;
use unigen_core::domain::{ApiKeyMaterial, Scope};
use unigen_db as db;
use unigen_db::models::{BillingAccount, NewApiKey, NewOrganization};
use unigen_db::{events, queries};
use uuid::Uuid;

#[derive(Parser)]
#[command(
    name = "unigen-api",
    version,
    about = "unigen HTTP API and operator commands"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve {
        /// Apply pending migrations before serving.
        #[arg(long)]
        migrate: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Operator commands.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Organizations.
    Org {
        #[command(subcommand)]
        command: OrgCommand,
    },
    /// API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Plans and their limits.
    Plan {
        #[command(subcommand)]
        command: PlanCommand,
    },
    /// Credits: purchases and balances.
    Credits {
        #[command(subcommand)]
        command: CreditsCommand,
    },
    /// Dashboard team members.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Add a member who signs in to the dashboard; prints it as JSON.
    Create {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        email: String,
        /// owner, admin, member or viewer.
        #[arg(long)]
        role: String,
        /// Read the password from standard input (its first line, at least
        /// 12 characters). Without it a password is generated and printed
        /// once in the output's `password`.
        #[arg(long)]
        password_stdin: bool,
    },
    /// An organization's members.
    List {
        #[arg(long)]
        org: Uuid,
    },
    /// Remove a member; its dashboard sessions end at once.
    Delete {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        email: String,
    },
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Every plan with its limits.
    List,
    /// Change a plan's limits (for every organization on it, at once).
    Set {
        #[arg(long)]
        code: String,
        #[arg(long)]
        included_credits: Option<i64>,
        /// Requests per minute per key.
        #[arg(long)]
        rate_limit: Option<i32>,
        /// Concurrent consuming requests per organization.
        #[arg(long)]
        concurrent: Option<i32>,
        /// A quota bucket: `<bucket>=<units>` or `<bucket>=unlimited` (repeatable).
        #[arg(long = "bucket")]
        buckets: Vec<String>,
    },
}

#[derive(Subcommand)]
enum CreditsCommand {
    /// Add purchased credits (a `purchase` transaction); they never expire.
    Add {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        credits: i64,
        #[arg(long, default_value = "Credit top-up")]
        note: String,
    },
    /// An organization's balances, and the ledger's sum (they must agree).
    Balance {
        #[arg(long)]
        org: Uuid,
    },
}

#[derive(Subcommand)]
enum OrgCommand {
    /// Create an organization.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long)]
        email: Option<String>,
        /// free, pro, business, cli_pro or cli_team.
        #[arg(long, default_value = "pro")]
        plan: String,
    },
    /// List organizations.
    List,
    /// Assign a plan (limits apply at once; included credits are adjusted).
    Plan {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        plan: String,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create a key; its value is printed once and cannot be shown again.
    Create {
        #[arg(long)]
        org: Uuid,
        #[arg(long)]
        name: String,
        /// Comma-separated scopes, or `all`.
        #[arg(long, default_value = "all")]
        scopes: String,
        /// Expiry: RFC 3339 time or YYYY-MM-DD (midnight UTC).
        #[arg(long)]
        expires: Option<String>,
    },
    /// List an organization's keys (never their values).
    List {
        #[arg(long)]
        org: Uuid,
    },
    /// Revoke a key, immediately and permanently.
    Revoke {
        #[arg(long)]
        id: Uuid,
    },
}

/// Entry point of the binary.
pub async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let settings = Settings::load().context("loading configuration")?;
    match cli.command.unwrap_or(Command::Serve { migrate: false }) {
        Command::Serve { migrate } => {
            let _telemetry = unigen_core::telemetry::init_logging(
                "unigen-api",
                &settings.telemetry,
                &settings.log,
            );
            if migrate {
                migrate_now(&settings).await?;
            }
            let shutdown = CancellationToken::new();
            tokio::spawn(unigen_core::telemetry::shutdown_on_signal(shutdown.clone()));
            crate::run(settings, shutdown).await
        }
        Command::Migrate => migrate_now(&settings).await,
        Command::Admin { command } => admin(&settings, command).await,
    }
}

async fn migrate_now(settings: &Settings) -> anyhow::Result<()> {
    let applied = db::run_migrations(&settings.database.url).await?;
    eprintln!(
        "migrations applied: {}",
        if applied.is_empty() {
            "none pending".into()
        } else {
            applied.join(", ")
        }
    );
    Ok(())
}

async fn admin(settings: &Settings, command: AdminCommand) -> anyhow::Result<()> {
    use diesel_async::{AsyncConnection, AsyncPgConnection};
    let mut conn = AsyncPgConnection::establish(&settings.database.url)
        .await
        .context("connecting to PostgreSQL")?;
    let output = match command {
        AdminCommand::Org {
            command: OrgCommand::Create { name, email, plan },
        } => {
            if queries::orgs::find_plan(&mut conn, &plan).await?.is_none() {
                let plans = queries::orgs::plan_codes(&mut conn).await?;
                bail!("unknown plan `{plan}`; plans: {}", plans.join(", "));
            }
            let new = NewOrganization {
                id: Uuid::now_v7(),
                name: &name,
                email: email.as_deref(),
                plan_code: &plan,
            };
            let org = conn
                .transaction::<_, db::DbError, _>(async |conn| {
                    let org = queries::orgs::create(conn, &new).await?;
                    let plan = queries::billing::plan_of_org(conn, org.id).await?;
                    let event = events::subscription(org.id, &plan, events::SUBSCRIPTION_CREATED);
                    queries::events::insert(conn, &event).await?;
                    Ok(org)
                })
                .await?;
            wake_webhooks(&mut conn, settings).await;
            json!({ "id": org.id, "name": org.name, "email": org.email, "plan": org.plan_code, "created_at": org.created_at })
        }
        AdminCommand::Org {
            command: OrgCommand::List,
        } => {
            let orgs = queries::orgs::list(&mut conn).await?;
            json!(orgs.iter().map(|o| json!({ "id": o.id, "name": o.name, "plan": o.plan_code, "status": o.status })).collect::<Vec<_>>())
        }
        AdminCommand::Org {
            command: OrgCommand::Plan { org, plan },
        } => {
            if queries::orgs::find_plan(&mut conn, &plan).await?.is_none() {
                let plans = queries::orgs::plan_codes(&mut conn).await?;
                bail!("unknown plan `{plan}`; plans: {}", plans.join(", "));
            }
            if queries::orgs::find(&mut conn, org).await?.is_none() {
                bail!("no organization with id {org}");
            }
            let account = conn
                .transaction::<_, db::DbError, _>(async |conn| {
                    queries::billing::change_plan(conn, org, &plan).await
                })
                .await?;
            wake_webhooks(&mut conn, settings).await;
            json!({ "org": org, "plan": plan, "included_credits": account.included_credits,
                    "included_remaining": account.included_remaining })
        }
        AdminCommand::Plan {
            command: PlanCommand::List,
        } => json!(
            queries::orgs::list_plans(&mut conn)
                .await?
                .iter()
                .map(plan_json)
                .collect::<Vec<_>>()
        ),
        AdminCommand::Plan {
            command:
                PlanCommand::Set {
                    code,
                    included_credits,
                    rate_limit,
                    concurrent,
                    buckets,
                },
        } => {
            let mut change = queries::orgs::PlanChange {
                included_credits,
                rate_limit_per_minute: rate_limit,
                concurrent_requests: concurrent,
                ..Default::default()
            };
            for entry in &buckets {
                apply_bucket_change(&mut change, entry)?;
            }
            if included_credits.is_some_and(|n| n < 0)
                || rate_limit.is_some_and(|n| n < 1)
                || concurrent.is_some_and(|n| n < 1)
            {
                bail!("limits must be positive (credits may be 0)");
            }
            match queries::orgs::update_plan(&mut conn, &code, &change).await? {
                Some(plan) => plan_json(&plan),
                None => bail!("unknown plan `{code}`"),
            }
        }
        AdminCommand::Credits {
            command: CreditsCommand::Add { org, credits, note },
        } => {
            if credits <= 0 {
                bail!("--credits must be positive");
            }
            if queries::orgs::find(&mut conn, org).await?.is_none() {
                bail!("no organization with id {org}");
            }
            let account = conn
                .transaction::<_, db::DbError, _>(async |conn| {
                    queries::billing::purchase(conn, org, credits, &note).await
                })
                .await?;
            balance_json(
                &account,
                queries::billing::ledger_sum(&mut conn, org).await?,
            )
        }
        AdminCommand::Credits {
            command: CreditsCommand::Balance { org },
        } => {
            if queries::orgs::find(&mut conn, org).await?.is_none() {
                bail!("no organization with id {org}");
            }
            let account = conn
                .transaction::<_, db::DbError, _>(async |conn| {
                    queries::billing::lock_account(conn, org).await
                })
                .await?
                .0;
            balance_json(
                &account,
                queries::billing::ledger_sum(&mut conn, org).await?,
            )
        }
        AdminCommand::Key {
            command:
                KeyCommand::Create {
                    org,
                    name,
                    scopes,
                    expires,
                },
        } => {
            let scopes =
                Scope::parse_list(&scopes).map_err(|e| anyhow::anyhow!("--scopes: {e}"))?;
            let expires_at = expires.as_deref().map(parse_expiry).transpose()?;
            if queries::orgs::find(&mut conn, org).await?.is_none() {
                bail!("no organization with id {org}");
            }
            let material = ApiKeyMaterial::generate()?;
            let key = queries::keys::insert(
                &mut conn,
                &NewApiKey {
                    id: Uuid::now_v7(),
                    org_id: org,
                    name: &name,
                    key_hash: &material.hash,
                    key_prefix: &material.display_prefix,
                    scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
                    expires_at,
                    created_by_key: None,
                    created_by_member: None,
                },
            )
            .await?;
            eprintln!("Store this key now: it is shown only once.");
            json!({ "id": key.id, "org_id": key.org_id, "name": key.name, "key": material.plaintext,
                    "scopes": key.scopes, "expires_at": key.expires_at })
        }
        AdminCommand::User { command } => user_command(&mut conn, command).await?,
        AdminCommand::Key {
            command: KeyCommand::List { org },
        } => {
            let keys = queries::keys::list_for_org(&mut conn, org).await?;
            json!(keys.iter().map(|k| json!({ "id": k.id, "name": k.name, "prefix": k.key_prefix, "scopes": k.scopes,
                "expires_at": k.expires_at, "revoked_at": k.revoked_at, "created_at": k.created_at })).collect::<Vec<_>>())
        }
        AdminCommand::Key {
            command: KeyCommand::Revoke { id },
        } => {
            if !queries::keys::revoke(&mut conn, id, Utc::now()).await? {
                bail!("no active key with id {id}");
            }
            json!({ "id": id, "revoked": true })
        }
    };
    println!("{}", serde_json::to_string_pretty(&output)?);
    Ok(())
}

fn member_json(member: &unigen_db::models::MemberRow) -> serde_json::Value {
    json!({ "id": member.id, "org_id": member.org_id, "email": member.email,
            "role": member.role, "created_at": member.created_at })
}

async fn user_command(
    conn: &mut diesel_async::AsyncPgConnection,
    command: UserCommand,
) -> anyhow::Result<serde_json::Value> {
    use unigen_dashboard::Role;
    use unigen_dashboard::team::{TeamError, add_member};
    Ok(match command {
        UserCommand::Create {
            org,
            email,
            role,
            password_stdin,
        } => {
            let role: Role = role.parse().map_err(|e| anyhow::anyhow!("--role: {e}"))?;
            let (password, generated) = if password_stdin {
                let mut line = String::new();
                std::io::stdin()
                    .read_line(&mut line)
                    .context("reading the password from standard input")?;
                (line.trim_end_matches(['\r', '\n']).to_owned(), false)
            } else {
                (
                    unigen_core::password::generate_password()
                        .map_err(|e| anyhow::anyhow!("generating a password: {e}"))?,
                    true,
                )
            };
            let member = match add_member(conn, org, &email, role, password.clone()).await {
                Ok(member) => member,
                Err(TeamError::UnknownOrganization) => bail!("no organization with id {org}"),
                Err(err) => bail!("{err}"),
            };
            let mut out = member_json(&member);
            if generated {
                eprintln!("Store this password now: it is shown only once.");
                out["password"] = json!(password);
            }
            out
        }
        UserCommand::List { org } => {
            if queries::orgs::find(conn, org).await?.is_none() {
                bail!("no organization with id {org}");
            }
            let members = queries::members::list_for_org(conn, org).await?;
            json!(members.iter().map(member_json).collect::<Vec<_>>())
        }
        UserCommand::Delete { org, email } => {
            let Some(member) = queries::members::find_by_email_for_org(conn, org, &email).await?
            else {
                bail!("organization {org} has no member with email {email}");
            };
            let sessions = queries::members::delete_sessions_of(conn, member.id).await?;
            queries::members::delete_for_org(conn, org, member.id).await?;
            json!({ "id": member.id, "email": member.email, "deleted": true, "sessions_ended": sessions })
        }
    })
}

fn plan_json(plan: &unigen_db::models::Plan) -> serde_json::Value {
    use unigen_db::billing::Bucket;
    let buckets: serde_json::Map<String, serde_json::Value> = Bucket::ALL
        .iter()
        .map(|b| (b.as_str().to_owned(), json!(plan.limit(*b))))
        .collect();
    json!({
        "code": plan.code,
        "name": plan.name,
        "included_credits": plan.included_credits,
        "overage_rate_usd": plan.overage_rate_micros.map(unigen_db::billing::usd),
        "rate_limit_per_minute": plan.rate_limit_per_minute,
        "concurrent_requests": plan.concurrent_requests,
        "buckets": buckets,
    })
}

/// `--bucket tts_chars=500000` or `--bucket chat_tokens=unlimited`.
fn apply_bucket_change(change: &mut queries::orgs::PlanChange, entry: &str) -> anyhow::Result<()> {
    use unigen_db::billing::Bucket;
    let (name, value) = entry.split_once('=').ok_or_else(|| {
        anyhow::anyhow!("--bucket `{entry}`: expected <bucket>=<units|unlimited>")
    })?;
    let bucket: Bucket = name.parse().map_err(|e| anyhow::anyhow!("--bucket: {e}"))?;
    let limit = match value {
        "unlimited" => None,
        units => Some(
            units
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| anyhow::anyhow!("--bucket `{entry}`: units must be >= 0"))?,
        ),
    };
    let slot = match bucket {
        Bucket::ChatTokens => &mut change.chat_tokens,
        Bucket::ImageGenerations => &mut change.image_generations,
        Bucket::VideoSeconds => &mut change.video_seconds,
        Bucket::SttSeconds => &mut change.stt_seconds,
        Bucket::TtsChars => &mut change.tts_chars,
        Bucket::ImageEdits => &mut change.image_edits,
        Bucket::MusicTracks => &mut change.music_tracks,
        Bucket::AgentRuns => &mut change.agent_runs,
    };
    *slot = Some(limit);
    Ok(())
}

/// Webhook delivery starts at once for the events just committed (the
/// schedulers' periodic check would find them too, later).
async fn wake_webhooks(conn: &mut diesel_async::AsyncPgConnection, settings: &Settings) {
    if let Err(err) = unigen_db::notify::send_events_recorded(conn, &settings.notify.channel).await
    {
        eprintln!("warning: could not wake webhook delivery: {err:#}");
    }
}

fn balance_json(account: &BillingAccount, ledger_sum: i64) -> serde_json::Value {
    json!({
        "org": account.org_id,
        "period": { "start": account.period_start, "end": account.period_end },
        "included_credits": account.included_credits,
        "included_remaining": account.included_remaining,
        "purchased": account.purchased_balance,
        "reserved": account.reserved_credits,
        "overage_credits": account.overage_credits,
        "balance": account.balance(),
        "ledger_sum": ledger_sum,
    })
}

/// RFC 3339, or a date meaning midnight UTC; must lie in the future.
fn parse_expiry(raw: &str) -> anyhow::Result<DateTime<Utc>> {
    let at = DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| {
            NaiveDate::parse_from_str(raw, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight").and_utc())
        })
        .map_err(|_| anyhow::anyhow!("--expires: `{raw}` is neither RFC 3339 nor YYYY-MM-DD"))?;
    if at <= Utc::now() {
        bail!("--expires: {at} is in the past");
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_changes_take_units_or_unlimited_and_name_bad_input() {
        let mut change = queries::orgs::PlanChange::default();
        apply_bucket_change(&mut change, "tts_chars=500000").unwrap();
        apply_bucket_change(&mut change, "chat_tokens=unlimited").unwrap();
        assert_eq!(change.tts_chars, Some(Some(500_000)));
        assert_eq!(change.chat_tokens, Some(None));
        assert_eq!(change.image_edits, None, "untouched");
        assert!(apply_bucket_change(&mut change, "tts_chars").is_err());
        assert!(apply_bucket_change(&mut change, "tts_chars=-1").is_err());
        assert!(apply_bucket_change(&mut change, "pixels=5").is_err());
    }

    #[test]
    fn expiry_accepts_dates_and_rfc3339_in_the_future_only() {
        assert_eq!(
            parse_expiry("2999-01-02").unwrap().to_rfc3339(),
            "2999-01-02T00:00:00+00:00"
        );
        assert!(parse_expiry("2999-01-02T03:04:05+02:00").is_ok());
        assert!(parse_expiry("2001-01-01").is_err());
        assert!(parse_expiry("tomorrow").is_err());
    }
}
