// The rule by which a convolution's lowered forms are chosen for a training step's two directions
// together. The CUDA backend times the forms; the rule is here, apart from CUDA, so that the CPU
// tests check it.
#pragma once
#include <algorithm>

namespace cnnscale {

// Times (ms) of one convolution's forward and filter gradient, each as it runs otherwise and in a
// lowered form (im2col + GEMM, or width-lowered), the form's filter-gradient time including its own
// lowering copy of x, which is also timed alone.
struct FormTimes {
  float forward_other = 0, forward_form = 0;
  float filter_other = 0, filter_form = 0;
  float copy = 0;
};

// Whether a forward whose own trial kept the other form should switch to the lowered form. A filter
// gradient after a forward in that form reads the forward's lowering instead of copying x again,
// so the switch is worth it where the form's forward plus its filter gradient without the copy
// (`switched`) beats the forward as it runs plus the faster filter gradient, which may be the
// form's own, copy included (`as_is`). The copy's time, measured apart, may exceed the filter
// gradient's measured with it (medians of separate runs): what is left is never taken as less than
// nothing.
struct FormSwitch {
  float as_is = 0, switched = 0;
  bool switches() const { return switched < as_is; }
};
inline FormSwitch weigh_forward_switch(const FormTimes& t) {
  return {t.forward_other + std::min(t.filter_other, t.filter_form),
          t.forward_form + std::max(0.0f, t.filter_form - t.copy)};
}

}  // namespace cnnscale
