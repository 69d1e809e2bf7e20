//! Shell completion scripts and man pages, generated from the command-line definitions
//! (`clap::Command`) that `main.rs` declares, so neither can drift from the real flags. Pure:
//! everything is rendered into memory; the caller decides where the bytes go.

use std::io::Write;
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// The completion script of `cmd` for `shell`, named after the command (`strata`).
pub fn completions(cmd: &mut clap::Command, shell: Shell) -> Vec<u8> {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, cmd, name, &mut out);
    out
}

/// Where each shell looks for a completion file under an installation prefix (`/usr/local`,
/// `/usr`): what `./dev dist` lays out and docs/install.md names.
pub fn completion_path(shell: Shell, name: &str) -> Option<PathBuf> {
    let p = match shell {
        Shell::Bash => format!("share/bash-completion/completions/{name}"),
        Shell::Zsh => format!("share/zsh/site-functions/_{name}"),
        Shell::Fish => format!("share/fish/vendor_completions.d/{name}.fish"),
        _ => return None,
    };
    Some(PathBuf::from(p))
}

/// The exit codes every page of the command documents (docs/operations.md has the details).
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "success: a --once run whose every partition is covered, a graceful stop, a finished restore"),
    ("1", "failure at run time: Kafka or the store unreachable or refusing, a task failed, data left unstored at shutdown; archive verify found problems"),
    ("2", "invalid configuration or usage: every problem of the file is listed with its key"),
    ("3", "dump --once: the deadline passed with partitions not covered; run it again"),
    ("4", "dump --once: retention deleted records before they were archived (see allow_retention_gaps)"),
    ("130", "a second SIGINT or SIGTERM: exit at once; nothing uncommitted is lost, it is read again"),
];

/// The manual page of `cmd` (one command or subcommand, already built): clap's sections, then
/// EXIT STATUS and SEE ALSO, which clap has no field for.
fn page(cmd: clap::Command, see_also: &[String]) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd);
    let mut out = Vec::new();
    man.render(&mut out)?;
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in EXIT_STATUS {
        writeln!(out, ".TP\n\\fB{code}\\fR\n{}", roff_text(meaning))?;
    }
    if !see_also.is_empty() {
        let refs: Vec<String> = see_also
            .iter()
            .map(|n| format!("\\fB{}\\fR(1)", roff_text(n)))
            .collect();
        writeln!(out, ".SH \"SEE ALSO\"\n{}", refs.join(", "))?;
    }
    Ok(out)
}

/// Plain text for a roff body line: a leading '.' or '\'' would be read as a request, a
/// backslash starts an escape, and '-' must be `\-` to stay a hyphen-minus (option names).
fn roff_text(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// Every man page of `cmd`: `(file name, roff)` for the command itself (`strata.1`) and each
/// visible subcommand (`strata-dump.1`, ...), each page pointing at the others.
pub fn man_pages(cmd: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let name = cmd.get_name().to_string();
    let subs: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let sub_names: Vec<String> = subs
        .iter()
        .map(|s| format!("{name}-{}", s.get_name()))
        .collect();
    let mut pages = vec![(format!("{name}.1"), page(cmd, &sub_names)?)];
    for (sub, sub_name) in subs.into_iter().zip(&sub_names) {
        pages.push((
            format!("{sub_name}.1"),
            page(sub, std::slice::from_ref(&name))?,
        ));
    }
    Ok(pages)
}

/// Writes every page of [`man_pages`] into `dir` (created when missing); returns the files.
pub fn write_man_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (file, roff) in man_pages(cmd)? {
        let path = dir.join(file);
        std::fs::write(&path, roff)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> clap::Command {
        clap::Command::new("demo")
            .version("1.2.3")
            .about("A demo")
            .subcommand(
                clap::Command::new("run").about("Runs").arg(
                    clap::Arg::new("once")
                        .long("once")
                        .action(clap::ArgAction::SetTrue),
                ),
            )
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn one_page_per_visible_command_with_exit_codes() {
        let pages = man_pages(demo()).unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["demo.1", "demo-run.1"]);
        let main = String::from_utf8(pages[0].1.clone()).unwrap();
        assert!(main.starts_with(".ie"), "{main}");
        assert!(main.contains(".TH demo 1"), "{main}");
        assert!(
            main.contains(".SH \"EXIT STATUS\"\n.TP\n\\fB0\\fR\n"),
            "{main}"
        );
        assert!(
            main.contains("\\fB3\\fR\ndump \\-\\-once: the deadline passed"),
            "{main}"
        );
        assert!(main.contains("\\fBdemo\\-run\\fR(1)"), "{main}");
        let run = String::from_utf8(pages[1].1.clone()).unwrap();
        assert!(run.contains("\\-\\-once"), "{run}");
        assert!(run.contains(".SH \"SEE ALSO\"\n\\fBdemo\\fR(1)"), "{run}");
    }

    #[test]
    fn roff_text_escapes_requests_and_backslashes() {
        assert_eq!(roff_text(".once"), "\\&.once");
        assert_eq!(roff_text("a\\b"), "a\\eb");
        assert_eq!(roff_text("--once"), "\\-\\-once");
        assert_eq!(roff_text("plain"), "plain");
    }

    #[test]
    fn bash_completion_names_the_subcommands_and_flags() {
        let text = String::from_utf8(completions(&mut demo(), Shell::Bash)).unwrap();
        assert!(text.contains("complete -F _demo"), "{text}");
        assert!(text.contains("--once"), "{text}");
        assert_eq!(
            completion_path(Shell::Zsh, "demo").unwrap(),
            PathBuf::from("share/zsh/site-functions/_demo")
        );
    }
}
