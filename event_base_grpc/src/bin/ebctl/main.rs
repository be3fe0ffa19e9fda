//! `ebctl`: the command-line client of the event_base gRPC management API.
//!
//! ```text
//! ebctl [--addr URL] [--token T] [-o table|json|jsonl] <command>
//!   status | topics | workers [add|remove] | metrics [--watch 2s] | top [--interval 1s] | wal
//!   pause TOPIC HANDLER | resume TOPIC HANDLER | cancel MSG_ID | schedules | unschedule NAME
//!   publish TOPIC (--data S | --data-file F | --stdin) [--broadcast | --repeat N] ...
//!   dlq list|show|replay|purge|tail | watch | trace MSG_ID | shutdown <strategy> | completions <shell>
//! ```
//!
//! `--addr` and `--token` also come from `EBCTL_ADDR` and `EBCTL_TOKEN`. Data goes to
//! stdout, diagnostics to stderr. `ebctl --help` lists the exit codes.

mod answer;
mod cli;
mod commands;
mod failure;
mod output;
mod top;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ebctl: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    match runtime.block_on(commands::run(&cli)) {
        Ok(answer::Done::Show(shown)) => {
            answer::print(cli.output, &shown);
            ExitCode::SUCCESS
        }
        Ok(answer::Done::Streamed) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{}", failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}
