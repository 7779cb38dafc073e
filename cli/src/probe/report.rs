//! Printing outcomes: each case's transcript (sent / expected / observed / verdict, with
//! the rule it checks) as it finishes, then a table of all verdicts.

use std::io::{self, Write};

use super::cases::Case;
use super::runner::{Outcome, Verdict};

/// One case's block.
pub fn case_block(out: &mut dyn Write, case: &Case, o: &Outcome) -> io::Result<()> {
    writeln!(
        out,
        "== {} [{}] {}",
        case.name,
        o.verdict.word(),
        case.summary
    )?;
    writeln!(out, "   rule: {}", case.cite)?;
    for l in &o.lines {
        writeln!(out, "   {:>2} {:<9} {}", l.step, l.what, l.text)?;
    }
    match &o.verdict {
        Verdict::Pass => {}
        Verdict::Fail => writeln!(
            out,
            "   verdict: FAIL at step {}",
            o.failed_step.unwrap_or(0)
        )?,
        Verdict::Known(why) => writeln!(
            out,
            "   verdict: KNOWN deviation at step {}: {why}",
            o.failed_step.unwrap_or(0)
        )?,
        Verdict::Skip(why) => writeln!(out, "   verdict: SKIP: {why}")?,
        Verdict::Error(why) => writeln!(out, "   verdict: ERROR: {why}")?,
    }
    Ok(())
}

/// The table of verdicts, then one line of totals.
pub fn table(out: &mut dyn Write, cases: &[Case], outcomes: &[Outcome]) -> io::Result<()> {
    let w = cases.iter().map(|c| c.name.len()).max().unwrap_or(4).max(4);
    writeln!(
        out,
        "{:<w$}  {:<9}  {:<7}  summary",
        "case", "needs", "verdict"
    )?;
    for (c, o) in cases.iter().zip(outcomes) {
        writeln!(
            out,
            "{:<w$}  {:<9}  {:<7}  {}",
            c.name,
            c.needs.name(),
            o.verdict.word(),
            c.summary
        )?;
    }
    writeln!(out, "{}", totals(outcomes))
}

/// The same table in Markdown, for a README.
pub fn markdown(out: &mut dyn Write, cases: &[Case], outcomes: &[Outcome]) -> io::Result<()> {
    writeln!(out, "| case | needs | verdict | checks | rule |")?;
    writeln!(out, "|---|---|---|---|---|")?;
    for (c, o) in cases.iter().zip(outcomes) {
        let verdict = match &o.verdict {
            Verdict::Known(why) => format!("KNOWN: {why}"),
            v => v.word().to_string(),
        };
        writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            c.name,
            c.needs.name(),
            verdict.replace('|', "\\|"),
            c.summary.replace('|', "\\|"),
            c.cite.replace('|', "\\|")
        )?;
    }
    Ok(())
}

/// `probe: N passed, N failed, N known, N skipped, N errors`.
pub fn totals(outcomes: &[Outcome]) -> String {
    let n = |f: fn(&Verdict) -> bool| outcomes.iter().filter(|o| f(&o.verdict)).count();
    format!(
        "probe: {} passed, {} failed, {} known, {} skipped, {} errors",
        n(|v| *v == Verdict::Pass),
        n(|v| *v == Verdict::Fail),
        n(|v| matches!(v, Verdict::Known(_))),
        n(|v| matches!(v, Verdict::Skip(_))),
        n(|v| matches!(v, Verdict::Error(_))),
    )
}

/// The same cases run against two targets: one line per case whose verdicts or answers
/// differ (SKIPs on either side are left out), then the count. Answers are compared
/// without each connection's own numbers (PSNs relative to the probe's first one).
pub fn diff(
    out: &mut dyn Write,
    cases: &[Case],
    a: (&str, &[Outcome]),
    b: (&str, &[Outcome]),
) -> io::Result<usize> {
    writeln!(out, "diff: {} vs {}", a.0, b.0)?;
    let mut n = 0;
    for (case, (x, y)) in cases.iter().zip(a.1.iter().zip(b.1)) {
        let skipped =
            matches!(x.verdict, Verdict::Skip(_)) || matches!(y.verdict, Verdict::Skip(_));
        // KNOWN is a FAIL with a label: what the target did is the same.
        let word = |v: &Verdict| match v {
            Verdict::Known(_) => "FAIL",
            v => v.word(),
        };
        if skipped || (word(&x.verdict) == word(&y.verdict) && x.answers == y.answers) {
            continue;
        }
        n += 1;
        writeln!(out, "DIFFERS {}: {}", case.name, case.summary)?;
        for (who, o) in [(a.0, x), (b.0, y)] {
            let answers = o.answers.join(", ");
            writeln!(out, "   {who:<10} {:<5} {answers}", o.verdict.word())?;
        }
    }
    writeln!(out, "diff: {n} cases differ")?;
    Ok(n)
}
