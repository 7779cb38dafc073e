//! The `flags!` macro: small bit-set newtypes (access flags, attribute masks, send
//! flags) without a dependency.
//!
//! A leaf module so that both the memory-region table and the verbs vocabulary can
//! define flag types without importing each other.

macro_rules! flags {
    ($(#[$m:meta])* $name:ident: $ty:ty { $($(#[$fm:meta])* $flag:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $ty);
        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($v);)*
            /// No flag set.
            pub const fn empty() -> Self { $name(0) }
            /// True when every flag of `other` is set.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// True when any flag of `other` is set.
            pub const fn intersects(self, other: Self) -> bool { self.0 & other.0 != 0 }
            /// Union.
            pub const fn union(self, other: Self) -> Self { $name(self.0 | other.0) }
            /// Flags set in both.
            pub const fn intersection(self, other: Self) -> Self { $name(self.0 & other.0) }
            /// Flags of `self` not in `other`.
            pub const fn difference(self, other: Self) -> Self { $name(self.0 & !other.0) }
            /// True when no flag is set.
            pub const fn is_empty(self) -> bool { self.0 == 0 }
        }
        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) { self.0 |= o.0 }
        }
    };
}
pub(crate) use flags;
