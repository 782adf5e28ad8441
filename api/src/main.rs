/// jemalloc instead of glibc's malloc: under load the API spent a quarter
/// of its CPU in glibc's allocator (arena locks, consolidation), and glibc
/// kept what thousands of parked connections had freed (214 MiB at 10,000
/// long polls with its default arenas).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(unigen_api::cli::main())
}
