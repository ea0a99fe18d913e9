// Every layer type, registered explicitly (a static library would otherwise drop unreferenced
// layer files). Adding a layer: one line here and CNNSCALE_REGISTER_LAYER in its file.
#pragma once

namespace cnnscale {

#define CNNSCALE_LAYER_TYPES(X) \
  X(Convolution)                \
  X(InnerProduct)               \
  X(Pooling)                    \
  X(ReLU)                       \
  X(Dropout)                    \
  X(BatchNorm)                  \
  X(LRN)                        \
  X(Eltwise)                    \
  X(Flatten)                    \
  X(Concat)                     \
  X(SoftmaxWithLoss)            \
  X(Accuracy)

#define CNNSCALE_DECLARE_REGISTER(T) void register_layer_##T();
CNNSCALE_LAYER_TYPES(CNNSCALE_DECLARE_REGISTER)
#undef CNNSCALE_DECLARE_REGISTER

inline void register_all_layers() {
#define CNNSCALE_CALL_REGISTER(T) register_layer_##T();
  CNNSCALE_LAYER_TYPES(CNNSCALE_CALL_REGISTER)
#undef CNNSCALE_CALL_REGISTER
}

}  // namespace cnnscale
