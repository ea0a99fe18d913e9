// Not compiled: the second file defining a member of SpreadProbe (declared in probe_a.cpp).
struct SpreadProbe;

void SpreadProbe::second() {}
