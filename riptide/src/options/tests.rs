//! Unit tests of the options' defaults and validation.

use super::*;

#[test]
fn defaults_are_valid() {
    Options::default().validate().unwrap();
}

#[test]
fn bad_options_name_the_field() {
    let cases: Vec<(Options, &str)> = vec![
        (
            Options {
                write_buffer_size: 10,
                ..Default::default()
            },
            "write_buffer_size",
        ),
        (
            Options {
                write_queues: 0,
                ..Default::default()
            },
            "write_queues",
        ),
        (
            Options {
                parallel_insert_helpers: 1025,
                ..Default::default()
            },
            "parallel_insert_helpers",
        ),
        (
            Options {
                write_wait_spin_micros: 10_001,
                ..Default::default()
            },
            "write_wait_spin_micros",
        ),
        (
            Options {
                write_lock_spin_nanos: 100_001,
                ..Default::default()
            },
            "write_lock_spin_nanos",
        ),
        (
            Options {
                immutable_stop_trigger: 0,
                immutable_slowdown_trigger: 0,
                ..Default::default()
            },
            "immutable_stop_trigger",
        ),
        (
            Options {
                immutable_slowdown_trigger: 20,
                ..Default::default()
            },
            "immutable_slowdown_trigger",
        ),
        (
            Options {
                max_group_size: 0,
                ..Default::default()
            },
            "max_group_size",
        ),
        (
            Options {
                max_group_bytes: 0,
                ..Default::default()
            },
            "max_group_bytes",
        ),
        (
            Options {
                redo_segment_size: 100,
                ..Default::default()
            },
            "redo_segment_size",
        ),
        (
            Options {
                max_flushes: 0,
                ..Default::default()
            },
            "max_flushes",
        ),
        (
            Options {
                block_size: 100,
                ..Default::default()
            },
            "block_size",
        ),
        (
            Options {
                bloom_bits_per_key: 99,
                ..Default::default()
            },
            "bloom_bits_per_key",
        ),
        (
            Options {
                level0_slowdown_layers: 50,
                ..Default::default()
            },
            "level0_slowdown_layers",
        ),
        (
            Options {
                extents_per_file: 1,
                ..Default::default()
            },
            "extents_per_file",
        ),
        (
            Options {
                slowdown_delay_micros: 5_000_000,
                ..Default::default()
            },
            "slowdown_delay_micros",
        ),
    ];
    for (opts, name) in cases {
        match opts.validate() {
            Err(Error::InvalidOption { option, .. }) => assert_eq!(option, name),
            other => panic!("{name}: expected InvalidOption, got {other:?}"),
        }
    }
}
