//! Local history: windows kept in the state directory (or in memory without
//! one), bounded by bytes and age, reloaded at start, and the merged profile
//! of a query over them.
