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
