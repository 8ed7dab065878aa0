//! `riptide stress --crash_points`: placeholder, filled below.
