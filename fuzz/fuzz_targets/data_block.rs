//! Fuzz target `data_block`: see `riptide::fuzzing::run` for the input format. Any panic, abort,
//! overflow or out-of-memory is a bug in the parser (or an oracle in riptide::fuzzing firing).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = riptide::fuzzing::run("data_block", data);
});
