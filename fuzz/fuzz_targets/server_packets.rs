//! Fuzz target `server_packets`: the MySQL-protocol decoders of `riptide serve` on arbitrary
//! bytes: command packets (`Command::parse`), COM_STMT_EXECUTE bodies (`decode_execute`, with
//! the parameter count taken from the first byte and the saved parameter types and long-data
//! buffers kept across calls, as a connection keeps them) and handshake responses
//! (`parse_handshake_response`). Any panic, abort, overflow or out-of-memory is a bug.
#![no_main]

use riptide_server::protocol::handshake::parse_handshake_response;
use riptide_server::protocol::{decode_execute, execute_stmt_id, Command, ParamType};
use std::collections::HashMap;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = Command::parse(data);
    let _ = parse_handshake_response(data);
    let _ = execute_stmt_id(data);
    if let Some((&first, rest)) = data.split_first() {
        let num_params = first as usize;
        let mut types: Vec<ParamType> = Vec::new();
        let mut long_data: HashMap<u16, Vec<u8>> = HashMap::new();
        // Long data for a few parameters, chosen by the second byte.
        if let Some(&mask) = rest.first() {
            for p in 0..8u16 {
                if mask & (1 << p) != 0 {
                    long_data.insert(p, rest.get(..p as usize).unwrap_or(rest).to_vec());
                }
            }
        }
        // Twice: the second call may reuse the types saved by the first.
        for _ in 0..2 {
            let before = (types.clone(), long_data.clone());
            match decode_execute(rest, num_params, &mut types, &mut long_data) {
                Ok(req) => {
                    if num_params > 0 {
                        assert_eq!(req.params.len(), num_params);
                        assert_eq!(types.len(), num_params);
                    }
                }
                Err(_) => {
                    // all-or-nothing: a failed decode changes nothing
                    assert_eq!((types.clone(), long_data.clone()), before);
                }
            }
        }
    }
});
