//! What ships: the tarball of `./dev dist` (unpacked and used as a new user would), the systemd
//! units (`systemd-analyze verify`), the Kubernetes examples (parsed; every strata flag, config
//! file, secret and probe they name exists) and the container definition (its runtime stage
//! installs what the binary links).

use super::common::strata_bin;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd`, failing the test with its output unless it exits 0.
fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out));
    out
}

fn bridge_jar() -> PathBuf {
    let jar = repo().join("bridge/kafka-rsm/target/strata-kafka-rsm.jar");
    assert!(
        jar.is_file(),
        "{} is missing: ./dev test builds it first (./dev setup, or mvn -q -f bridge/kafka-rsm/pom.xml package)",
        jar.display()
    );
    jar
}

/// `strata SUB --help`, or `strata --help` for an empty `sub`.
fn help_of(sub: &str) -> String {
    let mut cmd = Command::new(strata_bin());
    if !sub.is_empty() {
        cmd.arg(sub);
    }
    let out = cmd.arg("--help").output().unwrap();
    assert!(
        out.status.success(),
        "`strata {sub} --help` failed: not a strata command?\n{}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks a strata command line (without the program): its subcommand exists and each of its
/// `--flags` is one that subcommand's help lists. Returns the value of `--config`, if any.
fn check_command_line(args: &[String], origin: &str) -> Option<String> {
    let sub = args
        .first()
        .unwrap_or_else(|| panic!("{origin}: no strata subcommand"));
    let help = help_of(sub);
    let mut config = None;
    for (i, a) in args.iter().enumerate().skip(1) {
        let Some(flag) = a.strip_prefix("--") else {
            continue;
        };
        let name = flag.split('=').next().unwrap();
        let listed = help.lines().any(|l| {
            l.trim_start()
                .split([' ', ','])
                .any(|w| w == format!("--{name}"))
        });
        assert!(
            listed,
            "{origin}: `strata {sub}` has no flag --{name}:\n{help}"
        );
        if name == "config" {
            config = args.get(i + 1).cloned();
        }
    }
    config
}

#[test]
fn command_line_check_refuses_unknown_flags_and_commands() {
    let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert_eq!(
        check_command_line(&args("dump --once --config /c.toml"), "t"),
        Some("/c.toml".into())
    );
    for bad in ["dump --onse", "dumb --once", "tier --once"] {
        let r = std::panic::catch_unwind(|| check_command_line(&args(bad), "t"));
        assert!(r.is_err(), "{bad} passed");
    }
}

// --- the tarball ------------------------------------------------------------------------------

#[test]
fn dist_tarball_unpacks_into_an_empty_directory_and_works() {
    bridge_jar();
    let work = tempfile::tempdir().unwrap();
    let out_dir = work.path().join("dist");
    let out = run_ok(
        Command::new("bash")
            .current_dir(repo())
            .arg("./dev")
            .args(["dist", "--debug", "--binary", strata_bin(), "--out"])
            .arg(&out_dir),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tarball = PathBuf::from(stdout.lines().last().unwrap_or_default());
    let version = env!("CARGO_PKG_VERSION");
    let name = tarball
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches(".tar.gz")
        .to_string();
    assert!(
        name.starts_with(&format!("strata-{version}-")) && name.ends_with("-debug"),
        "{name}"
    );
    run_ok(
        Command::new("sha256sum")
            .current_dir(&out_dir)
            .args(["-c", "SHA256SUMS"]),
    );

    let root = work.path().join("unpacked");
    std::fs::create_dir(&root).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&root),
    );
    let pkg = root.join(&name);
    let expected = [
        "bin/strata",
        "share/strata/strata-kafka-rsm.jar",
        "share/strata/examples/example.toml",
        "share/strata/examples/dump.toml",
        "share/strata/examples/tier.toml",
        "lib/systemd/system/strata-dump.service",
        "lib/systemd/system/strata-dump-once.service",
        "lib/systemd/system/strata-dump-once.timer",
        "lib/systemd/system/strata-tier.service",
        "lib/sysusers.d/strata.conf",
        "share/bash-completion/completions/strata",
        "share/zsh/site-functions/_strata",
        "share/fish/vendor_completions.d/strata.fish",
        "share/man/man1/strata.1",
        "share/man/man1/strata-dump.1",
        "share/man/man1/strata-tier.1",
        "share/doc/strata/LICENSE",
        "share/doc/strata/README.md",
        "share/doc/strata/install.md",
    ];
    for f in expected {
        assert!(pkg.join(f).is_file(), "{f} is not in the tarball");
    }
    assert_eq!(
        std::fs::read(pkg.join("share/strata/strata-kafka-rsm.jar")).unwrap(),
        std::fs::read(bridge_jar()).unwrap(),
        "the bridge jar is the one built"
    );
    for unit in std::fs::read_dir(pkg.join("lib/systemd/system")).unwrap() {
        let unit = unit.unwrap().path();
        let source = repo()
            .join("deploy/systemd")
            .join(unit.file_name().unwrap());
        assert_eq!(
            std::fs::read(&unit).unwrap(),
            std::fs::read(&source).unwrap(),
            "{} differs from {}",
            unit.display(),
            source.display()
        );
    }

    // The binary from the tarball, as a new user runs it.
    let strata = pkg.join("bin/strata");
    let v = run_ok(Command::new(&strata).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("strata {version}")
    );
    let archive = format!("file://{}", work.path().join("archive").display());
    for example in ["example.toml", "dump.toml", "tier.toml"] {
        run_ok(
            Command::new(&strata)
                .current_dir(&pkg)
                .args(["validate", "--config"])
                .arg(format!("share/strata/examples/{example}"))
                .env("S3_ACCESS_KEY", "a")
                .env("S3_SECRET_KEY", "b")
                .env("KAFKA_PASSWORD", "c")
                .env("STRATA_STORE_URL", &archive)
                .env("STRATA_TIER_STORE_URL", &archive),
        );
    }

    // The bash completion script, through bash: subcommands, then a subcommand's flags.
    let complete = |words: &str, cword: usize, cur: &str, prev: &str| -> String {
        let script = format!(
            "source share/bash-completion/completions/strata\n\
             complete -p strata >/dev/null || exit 3\n\
             COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}\n\
             _strata strata '{cur}' '{prev}'\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
        );
        let out = run_ok(Command::new("bash").current_dir(&pkg).args([
            "--norc",
            "--noprofile",
            "-c",
            &script,
        ]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let subs = complete("strata d", 1, "d", "strata");
    assert!(subs.lines().any(|l| l == "dump"), "{subs}");
    let flags = complete("strata dump --on", 2, "--on", "dump");
    let flags: BTreeSet<&str> = flags.lines().collect();
    assert!(
        flags.contains("--once") && flags.contains("--once-deadline"),
        "{flags:?}"
    );

    let man = std::fs::read_to_string(pkg.join("share/man/man1/strata.1")).unwrap();
    assert!(man.contains(".TH strata 1"), "{man}");
    assert!(man.contains(".SH \"EXIT STATUS\""), "{man}");
    assert!(man.contains("\\fBstrata\\-dump\\fR(1)"), "{man}");
}

// --- systemd ----------------------------------------------------------------------------------

/// The unit files of deploy/systemd, checked by `systemd-analyze verify` in a scratch root that
/// holds the host's own units (for the targets they name) and strata at the path of ExecStart;
/// every ExecStart is a real strata command line.
#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        analyze.is_ok_and(|o| o.status.success()),
        "systemd-analyze is missing: ./dev setup installs Debian's systemd package"
    );
    let units_dir = repo().join("deploy/systemd");
    let mut units: Vec<PathBuf> = std::fs::read_dir(&units_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "service" || e == "timer")
        })
        .collect();
    units.sort();
    let names: Vec<String> = units
        .iter()
        .map(|u| u.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "strata-dump-once.service",
            "strata-dump-once.timer",
            "strata-dump.service",
            "strata-tier.service"
        ]
    );

    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir_all(r.join("usr/local/bin")).unwrap();
    std::fs::create_dir_all(r.join("usr/lib/systemd")).unwrap();
    std::fs::create_dir_all(r.join("etc/systemd/system")).unwrap();
    run_ok(
        Command::new("cp")
            .args(["-r", "/usr/lib/systemd/system"])
            .arg(r.join("usr/lib/systemd/")),
    );
    let bin = r.join("usr/local/bin/strata");
    if std::fs::hard_link(strata_bin(), &bin).is_err() {
        std::fs::copy(strata_bin(), &bin).unwrap();
    }
    let mut installed = Vec::new();
    for u in &units {
        let to = r.join("etc/systemd/system").join(u.file_name().unwrap());
        std::fs::copy(u, &to).unwrap();
        installed.push(to);
    }
    let verify = |files: &[PathBuf]| {
        Command::new("systemd-analyze")
            .args(["verify", "--man=no", "--generators=no"])
            .arg(format!("--root={}", r.display()))
            .args(files)
            .output()
            .unwrap()
    };
    let out = verify(&installed);
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify:\n{}",
        text(&out)
    );

    // The check itself: a unit systemd refuses fails it, and so does a warning.
    let bad = r.join("etc/systemd/system/strata-bad.service");
    std::fs::write(
        &bad,
        "[Service]\nType=oneshot\nExecStart=/usr/local/bin/strata dump --once --config /c\nRestartForceExitStatus=3\n",
    )
    .unwrap();
    assert!(!verify(std::slice::from_ref(&bad)).status.success());
    std::fs::write(
        &bad,
        "[Service]\nExecStart=/usr/local/bin/strata dump --config /c\nRestartSecs=3\n",
    )
    .unwrap();
    assert!(!verify(std::slice::from_ref(&bad)).stderr.is_empty());

    for u in &units {
        let unit = std::fs::read_to_string(u).unwrap();
        for line in unit.lines().filter_map(|l| l.strip_prefix("ExecStart=")) {
            let words: Vec<String> = line.split_whitespace().map(String::from).collect();
            assert_eq!(words[0], "/usr/local/bin/strata", "{line}");
            let config = check_command_line(&words[1..], &names_of(u));
            let config = config.unwrap_or_else(|| panic!("{line}: no --config"));
            let example = Path::new(&config).file_name().unwrap();
            assert!(
                units_dir.join(example).is_file(),
                "{}: {config} has no example beside the units",
                names_of(u)
            );
        }
    }
}

fn names_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

// --- Kubernetes -------------------------------------------------------------------------------

fn str_of<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {y:?}"))
}

fn list(y: &Yaml) -> &[Yaml] {
    y.as_vec().map(Vec::as_slice).unwrap_or(&[])
}

/// The pod spec of a workload, if the document is one.
fn pod_spec(doc: &Yaml) -> Option<&Yaml> {
    match doc["kind"].as_str()? {
        "CronJob" => Some(&doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => {
            Some(&doc["spec"]["template"]["spec"])
        }
        _ => None,
    }
}

/// `${NAME}` references without a fallback (`$${` is a literal): the variables a config needs
/// from its environment.
fn required_env(toml_text: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"(?:^|[^$])\$\{([A-Za-z_][A-Za-z0-9_]*)\}").unwrap();
    re.captures_iter(toml_text)
        .map(|c| c[1].to_string())
        .collect()
}

/// Every string value of a TOML document that is an absolute path.
fn absolute_paths(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::String(s) if s.starts_with('/') => out.push(s.clone()),
        toml::Value::Array(a) => a.iter().for_each(|x| absolute_paths(x, out)),
        toml::Value::Table(t) => t.values().for_each(|x| absolute_paths(x, out)),
        _ => {}
    }
}

#[test]
fn kubernetes_examples_parse_and_name_only_real_flags_keys_and_secrets() {
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let parsed = YamlLoader::load_from_str(&src)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", f.display()));
        for d in parsed {
            let what = format!("{} ({:?})", names_of(f), d["kind"]);
            str_of(&d["apiVersion"], &what);
            str_of(&d["kind"], &what);
            str_of(&d["metadata"]["name"], &what);
            docs.push((names_of(f), d));
        }
    }
    let kinds: BTreeSet<&str> = docs
        .iter()
        .map(|(_, d)| d["kind"].as_str().unwrap())
        .collect();
    for k in [
        "CronJob",
        "Deployment",
        "StatefulSet",
        "ConfigMap",
        "Secret",
    ] {
        assert!(kinds.contains(k), "no {k} among the examples: {kinds:?}");
    }

    let mut config_maps: BTreeMap<String, &Yaml> = BTreeMap::new();
    let mut secrets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, d) in &docs {
        let name = d["metadata"]["name"].as_str().unwrap().to_string();
        match d["kind"].as_str().unwrap() {
            "ConfigMap" => {
                config_maps.insert(name, &d["data"]);
            }
            "Secret" => {
                let keys = d["stringData"]
                    .as_hash()
                    .map(|h| h.keys().map(|k| str_of(k, &name).to_string()).collect())
                    .unwrap_or_default();
                secrets.insert(name, keys);
            }
            _ => {}
        }
    }
    // Secrets the examples tell the reader to create (kubectl create secret ... NAME) count,
    // with the keys their --from-literal/--from-file name.
    for f in &files {
        for (name, keys) in secrets_created_in(&std::fs::read_to_string(f).unwrap()) {
            if let Some(defined) = secrets.get(&name) {
                assert_eq!(
                    defined,
                    &keys,
                    "{}: the kubectl command and the manifest of Secret {name} name other keys",
                    names_of(f)
                );
            }
            secrets.insert(name, keys);
        }
    }

    let mut strata_containers = 0;
    for (file, d) in &docs {
        let Some(spec) = pod_spec(d) else { continue };
        let workload = format!(
            "{file}: {} {}",
            d["kind"].as_str().unwrap(),
            d["metadata"]["name"].as_str().unwrap()
        );
        let volumes: BTreeMap<&str, &Yaml> = list(&spec["volumes"])
            .iter()
            .map(|v| (str_of(&v["name"], &workload), v))
            .collect();
        let containers = list(&spec["containers"])
            .iter()
            .chain(list(&spec["initContainers"]));
        for c in containers {
            let cname = str_of(&c["name"], &workload);
            let origin = format!("{workload}, container {cname}");
            // Every mount names a volume of the pod (or a claim template).
            let mounts: Vec<(&str, &Yaml)> = list(&c["volumeMounts"])
                .iter()
                .map(|m| (str_of(&m["mountPath"], &origin), m))
                .collect();
            for (path, m) in &mounts {
                let v = str_of(&m["name"], &origin);
                let claim = list(&d["spec"]["volumeClaimTemplates"])
                    .iter()
                    .any(|t| t["metadata"]["name"].as_str() == Some(v));
                assert!(
                    volumes.contains_key(v) || claim,
                    "{origin}: {path} mounts unknown volume {v}"
                );
            }
            if !str_of(&c["image"], &origin).contains("strata") {
                continue;
            }
            strata_containers += 1;
            assert!(
                c["command"].is_badvalue(),
                "{origin}: keep the image's entrypoint, pass args"
            );
            let args: Vec<String> = list(&c["args"])
                .iter()
                .map(|a| str_of(a, &origin).to_string())
                .collect();
            let config = check_command_line(&args, &origin)
                .unwrap_or_else(|| panic!("{origin}: no --config"));

            // --config names a file of a mounted ConfigMap.
            let (cm_name, key) = mounts
                .iter()
                .find_map(|(path, m)| {
                    let vol = volumes.get(str_of(&m["name"], &origin))?;
                    let cm = vol["configMap"]["name"].as_str()?;
                    match m["subPath"].as_str() {
                        Some(sub) if *path == config => Some((cm, sub.to_string())),
                        None => Some((cm, config.strip_prefix(&format!("{path}/"))?.to_string())),
                        _ => None,
                    }
                })
                .unwrap_or_else(|| panic!("{origin}: --config {config} is on no ConfigMap mount"));
            let toml_text = config_maps
                .get(cm_name)
                .and_then(|data| data[key.as_str()].as_str())
                .unwrap_or_else(|| panic!("{origin}: ConfigMap {cm_name} has no key {key}"));

            // The secrets it needs come from the container's environment.
            let mut env: BTreeSet<String> = list(&c["env"])
                .iter()
                .map(|e| str_of(&e["name"], &origin).to_string())
                .collect();
            for from in list(&c["envFrom"]) {
                let s = str_of(&from["secretRef"]["name"], &origin);
                let keys = secrets.get(s).unwrap_or_else(|| {
                    panic!(
                        "{origin}: envFrom names Secret {s}, which no example defines or creates"
                    )
                });
                env.extend(keys.iter().cloned());
            }
            let needed = required_env(toml_text);
            let missing: Vec<&String> = needed.difference(&env).collect();
            assert!(
                missing.is_empty(),
                "{origin}: {config} needs {missing:?}, the pod does not set them"
            );

            // strata validate accepts the file with those variables set (and nothing else).
            let work = tempfile::tempdir().unwrap();
            let path = work.path().join("strata.toml");
            std::fs::write(&path, toml_text).unwrap();
            let mut validate = Command::new(strata_bin());
            validate
                .args(["validate", "--config"])
                .arg(&path)
                .current_dir(work.path())
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("AWS_EC2_METADATA_DISABLED", "true");
            for n in &needed {
                validate.env(n, "placeholder-value");
            }
            let out = run_ok(&mut validate);
            assert!(
                !text(&out).contains("placeholder-value"),
                "{origin}: validate printed a secret"
            );

            // Paths the config names are inside the container's mounts.
            let value: toml::Value = toml::from_str(toml_text).unwrap();
            let mut paths = Vec::new();
            absolute_paths(&value, &mut paths);
            for p in paths {
                assert!(
                    mounts
                        .iter()
                        .any(|(m, _)| p == *m || p.starts_with(&format!("{m}/"))),
                    "{origin}: {config} names {p}, which no volume of the container holds"
                );
            }

            // Probes ask the metrics listener, on its port, for a path strata serves or will.
            let listen = value["telemetry"]["metrics_listen"].as_str();
            for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                let get = &c[probe]["httpGet"];
                if get.is_badvalue() {
                    continue;
                }
                let path = str_of(&get["path"], &origin);
                assert!(
                    ["/healthz", "/readyz", "/metrics"].contains(&path),
                    "{origin}: {probe} {path}"
                );
                let port = match &get["port"] {
                    Yaml::Integer(n) => *n,
                    named => {
                        let n = str_of(named, &origin);
                        list(&c["ports"])
                            .iter()
                            .find(|p| p["name"].as_str() == Some(n))
                            .and_then(|p| p["containerPort"].as_i64())
                            .unwrap_or_else(|| {
                                panic!(
                                    "{origin}: {probe} names port {n}, which the container lacks"
                                )
                            })
                    }
                };
                let listen = listen.unwrap_or_else(|| {
                    panic!("{origin}: {probe} without telemetry.metrics_listen")
                });
                assert!(
                    listen.starts_with("0.0.0.0:") && listen.ends_with(&format!(":{port}")),
                    "{origin}: {probe} asks port {port}, telemetry.metrics_listen is {listen} (the kubelet probes the pod's address)"
                );
            }
        }
    }
    assert!(
        strata_containers >= 3,
        "{strata_containers} strata containers"
    );

    // What the examples promise about --once and the continuous dump.
    let cron = docs
        .iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"].as_str() == Some("CronJob"))
        .unwrap();
    assert_eq!(cron["spec"]["concurrencyPolicy"].as_str(), Some("Forbid"));
    let job = &cron["spec"]["jobTemplate"]["spec"];
    assert_eq!(
        job["template"]["spec"]["restartPolicy"].as_str(),
        Some("Never")
    );
    let fail_job: Vec<i64> = list(&job["podFailurePolicy"]["rules"])
        .iter()
        .filter(|r| r["action"].as_str() == Some("FailJob"))
        .flat_map(|r| {
            list(&r["onExitCodes"]["values"])
                .iter()
                .filter_map(Yaml::as_i64)
        })
        .collect();
    assert_eq!(
        fail_job,
        [2, 4],
        "exit codes 2 and 4 need a person; 1 and 3 are retried"
    );
    assert!(job["backoffLimit"].as_i64().is_some_and(|n| n >= 1));
    let deployment = docs
        .iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .unwrap();
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
}

/// `kubectl create secret generic NAME --from-literal=KEY=... --from-file=KEY=...` commands in
/// the comments of a file (continued over lines ending in `\\`): each Secret's name and keys.
fn secrets_created_in(src: &str) -> Vec<(String, BTreeSet<String>)> {
    let key = regex::Regex::new(r"--from-(?:literal|file)=([A-Za-z0-9_.-]+)").unwrap();
    let mut out = Vec::new();
    let mut lines = src.lines().map(|l| l.trim_start_matches([' ', '#']));
    while let Some(line) = lines.next() {
        let Some(rest) = line.split("kubectl create secret generic ").nth(1) else {
            continue;
        };
        let name = rest
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        let mut command = line.to_string();
        while command.trim_end().ends_with('\\') {
            command.push_str(lines.next().unwrap_or_default());
        }
        let keys = key
            .captures_iter(&command)
            .map(|c| c[1].to_string())
            .collect();
        out.push((name, keys));
    }
    out
}

#[test]
fn yaml_and_env_helpers() {
    let created = secrets_created_in(
        "# kubectl create secret generic s1 --from-file=tier.secret=./x\n\
         #   kubectl create secret generic s2 --from-literal=A=1 \\\n\
         #     --from-literal=B=2\n# other\n",
    );
    let keys = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        created,
        [
            ("s1".to_string(), keys(&["tier.secret"])),
            ("s2".to_string(), keys(&["A", "B"]))
        ]
    );
    assert_eq!(
        required_env("a = \"${A}\"\nb = \"${B:-x}\"\nc = \"$${C}\" d = \"${D}\""),
        ["A", "D"].iter().map(|s| s.to_string()).collect()
    );
    let docs = YamlLoader::load_from_str(
        "kind: CronJob\nspec: {jobTemplate: {spec: {template: {spec: {x: 1}}}}}\n",
    )
    .unwrap();
    assert_eq!(pod_spec(&docs[0]).unwrap()["x"].as_i64(), Some(1));
}

// --- the container image ----------------------------------------------------------------------

/// The Containerfile's instructions, continuation lines joined, comments dropped.
fn instructions(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in src.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(t);
                let (op, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((op.to_ascii_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// A multi-stage build whose final stage holds only the binary, runs it as a numeric non-root
/// user, and installs the Debian packages of every shared library the binary links.
#[test]
fn containerfile_is_multistage_non_root_and_ships_the_linked_libraries() {
    let src = std::fs::read_to_string(repo().join("deploy/container/Containerfile")).unwrap();
    let ins = instructions(&src);
    const KNOWN: &[&str] = &[
        "ARG",
        "FROM",
        "RUN",
        "WORKDIR",
        "COPY",
        "USER",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "LABEL",
        "EXPOSE",
    ];
    for (op, _) in &ins {
        assert!(KNOWN.contains(&op.as_str()), "unknown instruction {op}");
    }
    let froms: Vec<usize> = ins
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert!(froms.len() >= 2, "multi-stage: {} FROM", froms.len());
    let build_stage = ins[froms[0]]
        .1
        .rsplit_once(" AS ")
        .map(|(_, n)| n.trim().to_string())
        .expect("the build stage is named");
    let last = &ins[*froms.last().unwrap()..];
    let copies: Vec<&String> = last
        .iter()
        .filter(|(op, _)| op == "COPY")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(
        copies.len(),
        1,
        "the final stage copies the binary only: {copies:?}"
    );
    assert_eq!(
        copies[0],
        &format!("--from={build_stage} /usr/local/bin/strata /usr/local/bin/strata")
    );
    let user = last
        .iter()
        .rev()
        .find(|(op, _)| op == "USER")
        .map(|(_, a)| a.as_str())
        .expect("USER in the final stage");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric USER");
    assert_ne!(uid, 0, "non-root");
    let entry = last
        .iter()
        .find(|(op, _)| op == "ENTRYPOINT")
        .map(|(_, a)| a.as_str())
        .expect("ENTRYPOINT");
    assert_eq!(entry, "[\"/usr/local/bin/strata\"]");
    let runtime_install: String = last
        .iter()
        .filter(|(op, a)| op == "RUN" && a.contains("apt-get install"))
        .map(|(_, a)| a.clone())
        .collect();
    let build_install: String = ins[..*froms.last().unwrap()]
        .iter()
        .filter(|(op, a)| op == "RUN" && a.contains("apt-get install"))
        .map(|(_, a)| a.clone())
        .collect();
    for pkg in [
        "libssl-dev",
        "libcurl4-openssl-dev",
        "pkg-config",
        "build-essential",
        "cmake",
    ] {
        assert!(
            build_install.contains(pkg),
            "the build stage lacks {pkg}: {build_install}"
        );
    }
    assert!(
        runtime_install.contains("ca-certificates"),
        "{runtime_install}"
    );

    // What the binary links itself (its NEEDED entries; a package brings what its libraries
    // link), by the Debian package that has it in the slim image or must add it.
    let elf = run_ok(Command::new("readelf").arg("-d").arg(strata_bin()));
    let needed: Vec<String> = String::from_utf8_lossy(&elf.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
        .collect();
    assert!(
        needed.iter().any(|l| l.starts_with("libc.so")),
        "readelf names what strata links: {needed:?}"
    );
    for line in &needed {
        let lib = line.as_str();
        let package = match lib.split(".so").next().unwrap_or_default() {
            "ld-linux-x86-64" | "libc" | "libm" | "libdl" | "libpthread" | "librt" | "libgcc_s" => {
                continue // libc6 and libgcc-s1: in debian:*-slim
            }
            "libssl" | "libcrypto" => "libssl3",
            "libz" => "zlib1g",
            // librdkafka's OIDC token requests (OAUTHBEARER).
            "libcurl" => "libcurl4",
            other => panic!(
                "strata links {other} ({line}): add its Debian package to the final stage of deploy/container/Containerfile and to this map"
            ),
        };
        assert!(
            runtime_install.split_whitespace().any(|w| w == package),
            "strata links {lib}: the final stage must install {package}: {runtime_install}"
        );
    }
    // The build context holds the sources the build stage copies.
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    for (op, a) in &ins[..*froms.last().unwrap()] {
        if op != "COPY" {
            continue;
        }
        let parts: Vec<&str> = a.split_whitespace().collect();
        for s in &parts[..parts.len() - 1] {
            assert!(
                ignore
                    .lines()
                    .any(|l| l.trim_start_matches('!').trim_end_matches('/') == *s),
                ".dockerignore leaves out {s}"
            );
        }
    }
}
