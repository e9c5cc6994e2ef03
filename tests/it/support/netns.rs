//! Hosts for tests: Linux network namespaces joined by veth links.
//!
//! A [`Network`] is a switch (a namespace holding a Linux bridge) and hosts
//! (one namespace each, `eth0` at `10.200.0.<n + 1>/24`, a veth link to the
//! switch). Programs run on a host through `ip netns exec`, which becomes the
//! program, so a child's pid is the program's and signals reach it. Nothing
//! is routed out of the namespaces: the hosts reach each other and their own
//! loopback, and nothing else reaches them.
//!
//! Building one needs root and `ip` (iproute2); without them
//! [`Network::build`] says why, for the test's skip line. Dropping it kills
//! what still runs on its hosts and deletes the namespaces. Namespaces left
//! by a test process that died are deleted by the next build.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Every namespace of the harness has a name starting with this.
const PREFIX: &str = "agdx-";

/// Networks built by this process so far, so each gets names of its own.
static BUILT: AtomicU32 = AtomicU32::new(0);

/// A switch and the hosts linked to it.
pub struct Network {
    switch: String,
    hosts: Vec<Host>,
}

/// One host: a namespace with one link to the switch.
pub struct Host {
    /// The namespace's name.
    pub namespace: String,
    /// The host's address on the switch.
    pub address: Ipv4Addr,
    /// The switch's end of the host's link.
    port: String,
}

/// Runs `ip` with `args`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The namespaces that exist now.
fn namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the harness's namespaces whose test process is gone.
fn delete_orphans() {
    for namespace in namespaces() {
        let Some(pid) = namespace
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            kill_all_in(&namespace);
            let _ = ip(&["netns", "del", &namespace]);
            let _ = std::fs::remove_dir_all(names_dir(&namespace));
        }
    }
}

/// Where `ip netns exec` finds the files it puts over `/etc` for the
/// programs of `namespace` (its `hosts` among them).
fn names_dir(namespace: &str) -> String {
    format!("/etc/netns/{namespace}")
}

/// Kills (SIGKILL) every process running in `namespace`.
fn kill_all_in(namespace: &str) {
    let Ok(output) = Command::new("ip")
        .args(["netns", "pids", namespace])
        .output()
    else {
        return;
    };
    for pid in String::from_utf8_lossy(&output.stdout).split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
}

impl Network {
    /// A switch and `hosts` hosts linked to it, or why they cannot be made.
    pub fn build(hosts: usize) -> Result<Network, String> {
        if hosts == 0 || hosts > 250 {
            return Err(format!("a network has 1..=250 hosts, not {hosts}"));
        }
        delete_orphans();
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            BUILT.fetch_add(1, Ordering::Relaxed)
        );
        let switch = format!("{name}-sw");
        ip(&["netns", "add", &switch]).map_err(|why| {
            format!("cannot create a network namespace (needs root and iproute2): {why}")
        })?;
        let mut network = Network {
            switch,
            hosts: Vec::new(),
        };
        network.wire_switch()?;
        for n in 0..hosts {
            network.add_host(&name, n)?;
        }
        Ok(network)
    }

    fn wire_switch(&self) -> Result<(), String> {
        let sw = self.switch.as_str();
        ip(&["-n", sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", sw, "link", "set", "br0", "up"])
    }

    fn add_host(&mut self, name: &str, n: usize) -> Result<(), String> {
        let namespace = format!("{name}-h{n}");
        let port = format!("h{n}");
        let address = Ipv4Addr::new(10, 200, 0, n as u8 + 1);
        ip(&["netns", "add", &namespace])?;
        // Pushed before it is wired, so a failure below still deletes it.
        self.hosts.push(Host {
            namespace: namespace.clone(),
            address,
            port: port.clone(),
        });
        let sw = self.switch.as_str();
        let ns = namespace.as_str();
        ip(&[
            "link", "add", &port, "netns", sw, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ])?;
        ip(&["-n", sw, "link", "set", &port, "master", "br0"])?;
        ip(&["-n", sw, "link", "set", &port, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])
    }

    /// Host `n` (from 0).
    pub fn host(&self, n: usize) -> &Host {
        &self.hosts[n]
    }

    /// Takes host `n`'s link down at the switch: the host is cut off from
    /// every other host until [`Network::restore`].
    pub fn cut(&self, n: usize) -> Result<(), String> {
        ip(&[
            "-n",
            &self.switch,
            "link",
            "set",
            &self.hosts[n].port,
            "down",
        ])
    }

    /// Brings host `n`'s link back up.
    pub fn restore(&self, n: usize) -> Result<(), String> {
        ip(&["-n", &self.switch, "link", "set", &self.hosts[n].port, "up"])
    }

    /// Gives host `n` the name `names[n]` on every host (an `/etc/hosts`
    /// of their own, which `ip netns exec` mounts over the machine's), so
    /// programs reach each other by name as on a compose network.
    pub fn name_hosts(&self, names: &[&str]) -> Result<(), String> {
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (host, name) in self.hosts.iter().zip(names) {
            hosts.push_str(&format!("{} {name}\n", host.address));
        }
        for host in &self.hosts {
            let dir = names_dir(&host.namespace);
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(format!("{dir}/hosts"), &hosts))
                .map_err(|e| format!("cannot write {dir}/hosts: {e}"))?;
        }
        Ok(())
    }
}

impl Host {
    /// `program` to be run on this host.
    pub fn command(&self, program: impl AsRef<OsStr>) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace])
            .arg(program)
            .kill_on_drop(true);
        command
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for host in &self.hosts {
            kill_all_in(&host.namespace);
            let _ = ip(&["netns", "del", &host.namespace]);
            let _ = std::fs::remove_dir_all(names_dir(&host.namespace));
        }
        let _ = ip(&["netns", "del", &self.switch]);
    }
}
