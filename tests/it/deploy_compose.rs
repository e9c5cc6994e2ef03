//! The multi-host deploy, `deploy/multi-host-compose.yml`, run as compose
//! would run it but without a container engine: each service on a host of
//! its own (a network namespace, reachable by its service name as on a
//! compose network), with the environment, entrypoint and command the file
//! gives it. The Iggy service is `AGDX_TEST_IGGY_SERVER` with the
//! environment of `deploy/docker-compose.yml`'s service, which the file
//! extends; the image's `agdx` is this build's. What only a container has
//! is mapped onto a directory per host: the volume and working directory
//! `/var/lib/agdx` and `/tmp`.
//!
//! The requester's own loop asks the echo agent once a second, every tenth
//! time with a 1 MiB body (claim checks through the blob store on the
//! log, crossing hosts both ways). Once it has asked ten times, worker-a is
//! stopped as `docker compose stop worker-a` stops it (SIGTERM) and the
//! asks go on, answered by worker-b alone; five asks later worker-a is
//! started again and worker-b stopped, and worker-a answers alone. Every
//! ask must be answered, in order, the large bodies intact. Needs root, iproute2 and `AGDX_TEST_IGGY_SERVER`; without
//! them it says so in one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_yaml_ng::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support;
use support::netns::{Host, Network};

/// The services, in the order of their hosts.
const SERVICES: [&str; 4] = ["iggy", "worker-a", "worker-b", "requester"];

/// How long any one stage may take.
const LIMIT: Duration = Duration::from_secs(180);

/// A service as compose runs it: its environment and what it executes.
struct Service {
    environment: BTreeMap<String, String>,
    entrypoint: Vec<String>,
    command: Vec<String>,
}

/// `deploy/NAME`, parsed, with its `<<` merge keys applied.
fn compose_file(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("the compose file");
    let mut value: Value = serde_yaml_ng::from_str(&text).expect("the compose file is YAML");
    // A merge can bring in a mapping with merge keys of its own (x-worker
    // merges x-agdx): apply until none is left.
    for _ in 0..8 {
        let before = value.clone();
        value.apply_merge().expect("its merge keys apply");
        if value == before {
            return value;
        }
    }
    panic!("{name}: merge keys nested deeper than 8")
}

/// Compose's `$$`, a literal `$`.
fn unescape(text: &str) -> String {
    text.replace("$$", "$")
}

/// A list of strings, or one string split on whitespace (compose's two
/// forms of `command` and `entrypoint`).
fn words(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| unescape(item.as_str().expect("a string")))
            .collect(),
        Some(Value::String(text)) => text.split_whitespace().map(unescape).collect(),
        _ => Vec::new(),
    }
}

/// The environment of a service definition.
fn environment(service: &Value) -> BTreeMap<String, String> {
    let Some(Value::Mapping(entries)) = service.get("environment") else {
        return BTreeMap::new();
    };
    entries
        .iter()
        .map(|(key, value)| {
            let value = match value {
                Value::String(text) => unescape(text),
                other => serde_yaml_ng::to_string(other)
                    .expect("a scalar")
                    .trim()
                    .to_owned(),
            };
            (key.as_str().expect("a name").to_owned(), value)
        })
        .collect()
}

/// Service `name` of the multi-host file (the Iggy service's environment
/// from the file it extends).
fn service(multi: &Value, base: &Value, name: &str) -> Service {
    let definition = &multi["services"][name];
    let mut environment = environment(definition);
    if let Some(extends) = definition.get("extends") {
        let service = extends["service"]
            .as_str()
            .expect("extends names a service");
        environment.extend(self::environment(&base["services"][service]));
    }
    Service {
        environment,
        entrypoint: words(definition.get("entrypoint")),
        command: words(definition.get("command")),
    }
}

/// Container paths on `host_dir`: the volume and working directory, and
/// `/tmp`.
fn on_host(text: &str, host_dir: &Path) -> String {
    text.replace("/var/lib/agdx", &host_dir.display().to_string())
        .replace("/tmp/", &format!("{}/tmp/", host_dir.display()))
}

/// Starts `service` on `host` as the agdx image runs it (entrypoint
/// `agdx` unless the service names another), in `host_dir`, its standard
/// output to `stdout`.
fn start(service: &Service, host: &Host, host_dir: &Path, stdout: Stdio) -> tokio::process::Child {
    std::fs::create_dir_all(host_dir.join("tmp")).expect("the host's directories");
    let agdx = PathBuf::from(env!("CARGO_BIN_EXE_agdx"));
    let mut argv: Vec<String> = if service.entrypoint.is_empty() {
        vec![agdx.display().to_string()]
    } else {
        service.entrypoint.clone()
    };
    argv.extend(service.command.iter().map(|word| on_host(word, host_dir)));
    let path = format!(
        "{}:{}",
        agdx.parent().expect("a directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = host.command(&argv[0]);
    command
        .args(&argv[1..])
        .env_clear()
        .env("PATH", path)
        .env("HOME", host_dir)
        .envs(&service.environment)
        .current_dir(host_dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::inherit());
    command.spawn().expect("start a service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multi_host_deploy_runs_and_survives_a_stopped_worker_host() {
    let skip = |why: &str| support::say_skipped_once("deploy compose", why);
    let Some(iggy_server) = std::env::var_os("AGDX_TEST_IGGY_SERVER") else {
        return skip(
            "it runs the compose file's Iggy service from AGDX_TEST_IGGY_SERVER=/path/to/iggy-server (0.8.x), which is unset",
        );
    };
    let network = match Network::build(SERVICES.len()) {
        Ok(network) => network,
        Err(why) => return skip(&why),
    };
    if let Err(why) = network.name_hosts(&SERVICES) {
        return skip(&why);
    }
    let multi = compose_file("multi-host-compose.yml");
    let base = compose_file("docker-compose.yml");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let host_dir = |n: usize| dir.path().join(SERVICES[n]);

    // The Iggy service: the server binary with the service's environment,
    // its data volume on its host's directory.
    let mut iggy = service(&multi, &base, "iggy");
    let data = host_dir(0).join("local_data");
    std::fs::create_dir_all(&data).expect("the server's data directory");
    iggy.environment
        .insert("IGGY_SYSTEM_PATH".into(), data.display().to_string());
    let server_log = host_dir(0).join("server.log");
    let log = std::fs::File::create(&server_log).expect("the server log");
    let _server = network
        .host(0)
        .command(&iggy_server)
        .env_clear()
        .envs(&iggy.environment)
        .current_dir(host_dir(0))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("share the server log"))
        .stderr(log)
        .spawn()
        .expect("start the Iggy service");

    // Compose starts the others once the server's container is up; here,
    // once it answers (as a health check would say), so the requester's
    // first `agdx init` finds it.
    let requester = service(&multi, &base, "requester");
    let started = Instant::now();
    loop {
        let init = network
            .host(3)
            .command(env!("CARGO_BIN_EXE_agdx"))
            .arg("init")
            .env_clear()
            .envs(&requester.environment)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run agdx init");
        if init.status.success() {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the Iggy service never answered by name: {}\nserver log:\n{}",
            String::from_utf8_lossy(&init.stderr),
            support::tail(&server_log)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let worker = |n: usize| {
        let definition = service(&multi, &base, SERVICES[n]);
        start(&definition, network.host(n), &host_dir(n), Stdio::null())
    };
    let (mut worker_a, worker_b) = (worker(1), worker(2));
    let mut asker = start(&requester, network.host(3), &host_dir(3), Stdio::piped());
    let mut lines = BufReader::new(asker.stdout.take().expect("the requester's output")).lines();
    let mut printed = Vec::new();
    // The lines the asks print (`agdx init` prints too) up to ask `n`.
    let mut asks_up_to = async |n: usize, printed: &mut Vec<String>| loop {
        let line = tokio::time::timeout(LIMIT, lines.next_line())
            .await
            .expect("the requester goes on asking")
            .expect("read the requester's output")
            .expect("the requester runs until stopped");
        eprintln!("requester: {line}");
        assert!(!line.contains("FAILED"), "an ask failed: {line}");
        if line.starts_with("hello ") || line.starts_with("ask ") {
            let last = line == format!("hello {n}") || line.starts_with(&format!("ask {n}:"));
            printed.push(line);
            if last {
                return;
            }
        }
    };
    // Both hosts up; the tenth ask with 1 MiB each way.
    asks_up_to(10, &mut printed).await;
    // `docker compose stop worker-a`: worker-b answers alone.
    stop(worker_a, "worker-a").await;
    asks_up_to(15, &mut printed).await;
    // `docker compose start worker-a`, then `stop worker-b`: worker-a
    // answers alone, the twentieth with 1 MiB. So each host has served
    // asks, and each stop handed its partitions over.
    worker_a = worker(1);
    stop(worker_b, "worker-b").await;
    asks_up_to(20, &mut printed).await;
    let expected: Vec<String> = (1..=20)
        .map(|n| {
            if n % 10 == 0 {
                format!("ask {n}: 1 MiB body echoed intact")
            } else {
                format!("hello {n}")
            }
        })
        .collect();
    assert_eq!(printed, expected, "every ask answered, in order");
    let _ = asker.start_kill();
    let _ = worker_a.start_kill();
    let _ = worker_a.wait().await;
}

/// Stops `worker` as `docker compose stop` does: SIGTERM, then at most its
/// grace period; it must exit cleanly.
async fn stop(worker: tokio::process::Child, name: &str) {
    let pid = worker.id().expect("the worker runs");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let stopped = tokio::time::timeout(Duration::from_secs(150), worker.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{name} stops within its grace period"))
        .expect("wait for the worker");
    assert!(
        stopped.status.success(),
        "{name} stopped: {}",
        stopped.status
    );
}
