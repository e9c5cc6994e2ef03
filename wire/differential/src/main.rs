//! Differential test of agdx-wire against the reference implementation
//! (laser-wire, pinned in Cargo.toml): both decode, validate and re-encode
//! the reference's whole public agent corpus, our own corpus, and a bounded
//! number of structure-aware mutations of both, and must agree on each: both
//! accept and write the same bytes, or both refuse. A disagreement is
//! accepted only as one of the known differences in `known.rs` (a leniency
//! of the reference our spec forbids), shown to be the only cause. Signed
//! vectors must verify against the preimage the reference computes.
//!
//! ```sh
//! cargo run --release --ignore-rust-version -- --inputs 20000 --seed 1
//! ```
//!
//! `AGDX_DIFF_INPUTS` and `AGDX_DIFF_SEED` stand in for the flags;
//! `--dump DIR` writes each failing generated input to `DIR/<n>.bin`;
//! `--check HEX [TYPE]` compares one input and says why they differ. The exit
//! status is 1 when anything disagrees in a way the known list does not
//! explain.

mod cbor;
mod corpus;
mod known;
mod mutate;
mod record;
mod run;
mod signing;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::process::ExitCode;

use corpus::Seed;
use known::Leniency;
use run::{Outcome, Payload, hex};

/// How one input came out.
enum Verdict {
    /// Both accepted and wrote the same bytes; `signed` when the input is a
    /// signed envelope and both compute the same signing input.
    SameBytes { signed: bool },
    /// Both refused.
    BothRefuse,
    /// The reference accepted what agdx refuses, for these known reasons only.
    Known(Vec<Leniency>),
    /// Anything else.
    Failure(String),
}

fn compare(payload: Payload, bytes: &[u8]) -> Verdict {
    let ours = run::agdx(payload, bytes);
    let theirs = run::reference(payload, bytes);
    if ours == Outcome::Panicked {
        return Verdict::Failure("agdx panicked".into());
    }
    if ours.agrees_with(&theirs) {
        return match ours {
            Outcome::Accepted(_) if payload == Payload::Envelope => {
                match signing::same_preimage(bytes) {
                    Ok(signed) => Verdict::SameBytes { signed },
                    Err(why) => Verdict::Failure(why),
                }
            }
            Outcome::Accepted(_) => Verdict::SameBytes { signed: false },
            _ => Verdict::BothRefuse,
        };
    }
    let explained = match (&ours, &theirs, cbor::parse(bytes)) {
        (refused, Outcome::Accepted(_), Some(tree)) if refused.is_rejection() => explains(
            payload,
            known::normalize(&tree, payload),
            (run::agdx, run::reference),
            &theirs,
            Leniency::PresenceVersion,
        ),
        (Outcome::Accepted(_), refused, Some(tree)) if refused.is_rejection() => explains(
            payload,
            known::without_refused(&tree, payload),
            (run::reference, run::agdx),
            &ours,
            Leniency::PresenceInboxCap,
        ),
        _ => None,
    };
    match explained {
        Some(found) => Verdict::Known(found),
        None => Verdict::Failure(format!(
            "agdx {}\n      reference {}",
            ours.short(),
            theirs.short()
        )),
    }
}

/// One implementation's outcome for an input.
type Run = fn(Payload, &[u8]) -> Outcome;

/// The known differences `found`, when they are the whole cause: on the
/// input with them undone (`fixed`), the side that refused (`redo`) gives
/// what the other gave for the original (`wanted`), or, for a rule the
/// other side lacks (`rule`), both agree.
fn explains(
    payload: Payload,
    (fixed, found): (cbor::Node, Vec<Leniency>),
    (redo, other): (Run, Run),
    wanted: &Outcome,
    rule: Leniency,
) -> Option<Vec<Leniency>> {
    let fixed = fixed.encode();
    let again = redo(payload, &fixed);
    let by_rule = found.contains(&rule) && again.agrees_with(&other(payload, &fixed));
    (!found.is_empty() && (again.agrees_with(wanted) || by_rule)).then_some(found)
}

/// Long hex cut in the middle, so a report stays readable.
fn shortened(hex: &str) -> String {
    if hex.len() <= 400 {
        return hex.to_owned();
    }
    format!(
        "{}...{} ({} bytes)",
        &hex[..200],
        &hex[hex.len() - 100..],
        hex.len() / 2
    )
}

/// Verdicts counted.
#[derive(Default)]
struct Tally {
    same_bytes: usize,
    /// Of those, signed envelopes with the same signing input in both.
    same_preimage: usize,
    both_refuse: usize,
    known_inputs: usize,
    by_leniency: BTreeMap<Leniency, usize>,
    failures: Vec<String>,
    /// Where to write each failing input whole, when asked to.
    dump: Option<std::path::PathBuf>,
}

impl Tally {
    /// Compares one input; false when it is a failure.
    fn add(&mut self, label: &str, payload: Payload, bytes: &[u8]) -> bool {
        match compare(payload, bytes) {
            Verdict::SameBytes { signed } => {
                self.same_bytes += 1;
                self.same_preimage += usize::from(signed);
            }
            Verdict::BothRefuse => self.both_refuse += 1,
            Verdict::Known(found) => {
                self.known_inputs += 1;
                for leniency in found {
                    *self.by_leniency.entry(leniency).or_default() += 1;
                }
            }
            Verdict::Failure(why) => {
                if let Some(dir) = &self.dump {
                    let file = dir.join(format!("{}.bin", self.failures.len()));
                    if let Err(e) =
                        std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&file, bytes))
                    {
                        eprintln!("cannot write {}: {e}", file.display());
                    }
                }
                self.failures.push(format!(
                    "{label} ({payload:?}): {why}\n      input {}",
                    shortened(&hex(bytes))
                ));
                return false;
            }
        }
        true
    }

    fn line(&self) -> String {
        let mut out = format!(
            "both accept the same bytes {} (signed, with the same signing input: {}), both refuse {}, known differences {}",
            self.same_bytes, self.same_preimage, self.both_refuse, self.known_inputs
        );
        if !self.by_leniency.is_empty() {
            let parts: Vec<String> = self
                .by_leniency
                .iter()
                .map(|(k, n)| format!("{k:?} {n}"))
                .collect();
            out.push_str(&format!(" ({})", parts.join(", ")));
        }
        out.push_str(&format!(", failures {}", self.failures.len()));
        out
    }
}

/// Compares the corpus files themselves, and checks each behaves as its
/// corpus says: a positive accepted and re-encoded byte for byte, a
/// negative refused.
fn corpus_phase(name: &str, seeds: &[Seed], failures: &mut Vec<String>) {
    let mut tally = Tally::default();
    for seed in seeds {
        if !tally.add(&seed.name, seed.payload, &seed.bytes) {
            continue;
        }
        let ours = run::agdx(seed.payload, &seed.bytes);
        let as_named = match &ours {
            Outcome::Accepted(again) => seed.valid && *again == seed.bytes,
            _ => !seed.valid,
        };
        if !as_named {
            tally.failures.push(format!(
                "{}: agdx {} where the corpus says {}",
                seed.name,
                ours.short(),
                if seed.valid {
                    "valid, re-encoding byte for byte"
                } else {
                    "refused"
                }
            ));
        }
    }
    println!("{name}: {} files: {}", seeds.len(), tally.line());
    failures.append(&mut tally.failures);
}

/// Mutates seeds into `inputs` new inputs and compares each.
fn generated_phase(
    seeds: &[Seed],
    (inputs, seed): (u64, u64),
    dump: Option<std::path::PathBuf>,
    failures: &mut Vec<String>,
) {
    let trees: Vec<(usize, cbor::Node)> = seeds
        .iter()
        .enumerate()
        .filter_map(|(i, s)| cbor::parse(&s.bytes).map(|t| (i, t)))
        .collect();
    let donors: Vec<cbor::Node> = trees.iter().map(|(_, t)| t.clone()).collect();
    let mut rng = mutate::Rng::new(seed);
    let mut tally = Tally {
        dump,
        ..Tally::default()
    };
    let mut by_payload: BTreeMap<Payload, u64> = BTreeMap::new();
    for n in 0..inputs {
        // Two inputs in five mutate a positive gently, so that both sides
        // have bytes to compare; envelopes, what the contract is mostly
        // about, are three in four, capsules the rest.
        let gentle = rng.chance(40);
        let envelopes = rng.chance(75);
        let pool: Vec<&(usize, cbor::Node)> = trees
            .iter()
            .filter(|(i, _)| !gentle || seeds[*i].valid)
            .filter(|(i, _)| (seeds[*i].payload == Payload::Envelope) == envelopes)
            .collect();
        let (index, tree) = *rng.pick(&pool);
        let seed_file = &seeds[*index];
        let mut tree = tree.clone();
        mutate::mutate(&mut rng, &mut tree, &donors, gentle);
        let mut bytes = tree.encode();
        mutate::damage(&mut rng, &mut bytes);
        *by_payload.entry(seed_file.payload).or_default() += 1;
        tally.add(
            &format!("input {n} (from {})", seed_file.name),
            seed_file.payload,
            &bytes,
        );
    }
    let payloads: Vec<String> = by_payload
        .iter()
        .map(|(p, n)| format!("{p:?} {n}"))
        .collect();
    println!(
        "generated: {inputs} inputs from seed {seed} ({}): {}",
        payloads.join(", "),
        tally.line()
    );
    failures.append(&mut tally.failures);
}

/// `--check HEX [TYPE]`: one input, both outcomes and the verdict.
fn check_one(hex_input: Option<&String>, type_name: Option<&String>) -> ExitCode {
    let payload = type_name.map_or(Some(Payload::Envelope), |t| Payload::from_type_name(t));
    let bytes = hex_input.and_then(|h| signing::unhex(h).ok());
    let (Some(payload), Some(bytes)) = (payload, bytes) else {
        eprintln!(
            "--check takes the input as hex, then optionally its type (envelope, error-body, ...)"
        );
        return ExitCode::from(2);
    };
    println!("agdx      {}", run::agdx(payload, &bytes).short());
    println!("reference {}", run::reference(payload, &bytes).short());
    match compare(payload, &bytes) {
        Verdict::SameBytes { signed: false } => println!("agree: the same bytes"),
        Verdict::SameBytes { signed: true } => {
            println!("agree: the same bytes and the same signing input")
        }
        Verdict::BothRefuse => println!("agree: both refuse"),
        Verdict::Known(found) => println!("known difference: {found:?}"),
        Verdict::Failure(_) => {
            println!("unexplained difference");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// `--name value` or the environment variable, else `default`.
fn setting(args: &[String], flag: &str, env: &str, default: u64) -> Result<u64, String> {
    let text = match args.iter().position(|a| a == flag) {
        Some(at) => args
            .get(at + 1)
            .cloned()
            .ok_or_else(|| format!("{flag} needs a number"))?,
        None => match std::env::var(env) {
            Ok(v) => v,
            Err(_) => return Ok(default),
        },
    };
    text.parse()
        .map_err(|_| format!("{flag} (or {env}) must be a whole number, got {text:?}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = setting(&args, "--inputs", "AGDX_DIFF_INPUTS", 10_000)
        .and_then(|inputs| Ok((inputs, setting(&args, "--seed", "AGDX_DIFF_SEED", 1)?)));
    let (inputs, seed) = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(at) = args.iter().position(|a| a == "--check") {
        return check_one(args.get(at + 1), args.get(at + 2));
    }
    let mut failures = Vec::new();
    let theirs = corpus::reference();
    corpus_phase(
        "reference agent corpus (laser-wire 0.5.3)",
        &theirs,
        &mut failures,
    );
    record::check(&mut failures);
    let ours = match corpus::ours() {
        Ok(seeds) => seeds,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    corpus_phase("our corpus (fixtures/)", &ours, &mut failures);
    signing::check(&mut failures);
    let all: Vec<Seed> = theirs.into_iter().chain(ours).collect();
    let dump = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|at| args.get(at + 1))
        .map(std::path::PathBuf::from);
    generated_phase(&all, (inputs, seed), dump, &mut failures);

    println!("known differences, each with why it stays:");
    for (leniency, why) in known::KNOWN {
        println!("  {leniency:?}: {why}");
    }
    if failures.is_empty() {
        println!("no unexplained difference");
        return ExitCode::SUCCESS;
    }
    println!("{} unexplained difference(s):", failures.len());
    for failure in failures.iter().take(20) {
        println!("  {failure}");
    }
    ExitCode::FAILURE
}
