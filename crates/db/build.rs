//! `embed_migrations!` reads `migrations/` at compile time, but cargo does
//! not know: without this a new migration directory alone (no Rust change in
//! this crate) left binaries embedding the old set.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
