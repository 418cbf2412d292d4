//! `switchyard`: fetch URLs with a connection timeline, or run the demo.
// A command-line tool prints by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::Parser;
use switchyard_cli::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Get(args) => switchyard_cli::get::run(args).await,
            Command::Demo(args) => switchyard_cli::demo::run(args.json).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: error: {}", e.0);
            ExitCode::FAILURE
        }
    }
}
