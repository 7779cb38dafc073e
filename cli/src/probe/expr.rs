//! The small arithmetic of case files: `epsn+1`, `va+4096`, `orig-1`, `0x10`.
//!
//! A case names PSNs, addresses and values relative to the connection it runs on (the
//! target's PSN, buffer address and key are only known once connected), so its fields
//! are expressions over named values, evaluated when the step runs.

/// Evaluates `text`: terms (decimal or `0x` hex numbers, or names that `lookup` knows)
/// joined by `+` and `-`, in wrapping 64-bit arithmetic.
pub fn eval(text: &str, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<u64, String> {
    let mut total: u64 = 0;
    let mut sign_plus = true;
    let mut expect_term = true;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("empty expression".into());
    }
    while !rest.is_empty() {
        rest = rest.trim_start();
        if expect_term {
            let end = rest
                .find(|c: char| c == '+' || c == '-' || c.is_whitespace())
                .unwrap_or(rest.len());
            let term = &rest[..end];
            if term.is_empty() {
                return Err(format!("'{text}': a term is missing"));
            }
            let v = term_value(term, lookup).ok_or_else(|| {
                format!("'{text}': '{term}' is neither a number nor a known name")
            })?;
            total = if sign_plus {
                total.wrapping_add(v)
            } else {
                total.wrapping_sub(v)
            };
            rest = &rest[end..];
            expect_term = false;
        } else {
            sign_plus = match rest.as_bytes()[0] {
                b'+' => true,
                b'-' => false,
                _ => return Err(format!("'{text}': expected + or -")),
            };
            rest = &rest[1..];
            expect_term = true;
        }
    }
    if expect_term {
        return Err(format!("'{text}' ends with an operator"));
    }
    Ok(total)
}

fn term_value(term: &str, lookup: &dyn Fn(&str) -> Option<u64>) -> Option<u64> {
    if let Some(hex) = term.strip_prefix("0x").or_else(|| term.strip_prefix("0X")) {
        return u64::from_str_radix(&hex.replace('_', ""), 16).ok();
    }
    if term.as_bytes()[0].is_ascii_digit() {
        return term.replace('_', "").parse().ok();
    }
    lookup(term)
}

/// Checks that `text` is well formed and names only what `known` accepts, without values:
/// a case file's mistakes are reported when it is loaded, not half-way through a run.
pub fn check(text: &str, known: &dyn Fn(&str) -> bool) -> Result<(), String> {
    eval(text, &|name| known(name).then_some(0)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<u64> {
        match name {
            "epsn" => Some(100),
            "va" => Some(0x1000),
            _ => None,
        }
    }

    #[test]
    fn sums_names_and_numbers() {
        assert_eq!(eval("epsn", &env), Ok(100));
        assert_eq!(eval("epsn+1", &env), Ok(101));
        assert_eq!(eval(" epsn - 2 + 0x10 ", &env), Ok(114));
        assert_eq!(eval("va+4_096", &env), Ok(0x2000));
        assert_eq!(eval("0", &env), Ok(0));
        assert_eq!(eval("0-1", &env), Ok(u64::MAX));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(eval("", &env).is_err());
        assert!(eval("epsn+", &env).is_err());
        assert!(eval("+1", &env).is_err());
        assert!(eval("nope", &env).unwrap_err().contains("nope"));
        assert!(eval("1 2", &env).is_err());
        assert!(eval("0xzz", &env).is_err());
        assert!(check("epsn+orig", &|n| n == "epsn").is_err());
        assert!(check("epsn+1", &|n| n == "epsn").is_ok());
    }
}
