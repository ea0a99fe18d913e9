// Not compiled: read by the class_spread_names_offenders test, which runs the class-spread check
// over this folder with a limit of one file and must name SpreadProbe, defined here and in probe_b.cpp.
struct SpreadProbe {
  void first();
  void second();
};

void SpreadProbe::first() {}
