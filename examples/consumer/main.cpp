// Uses the installed lattn: a tensor view, a dtype round trip and a slice.
#include <cstdio>
#include <vector>

#include <lattn/lattn.h>

int main() {
  std::vector<float> data(2 * 3 * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(i);
  lattn::Tensor t(data.data(), lattn::DType::f32, {2, 3, 4});
  const lattn::Tensor row = t.select(0, 1).narrow(0, 1, 2);  // [2, 4] starting at element 16
  const float first = *static_cast<float*>(row.data());
  const float rounded = lattn::bf16_to_f32(lattn::f32_to_bf16(1.0f / 3.0f));
  if (first != 16.0f || rounded != 0.333984375f) {
    std::printf("consumer FAILED: first=%g rounded=%.9g\n", first, rounded);
    return 1;
  }
  std::printf("consumer ok: lattn %s, view %s\n", lattn::version(), row.describe().c_str());
  return 0;
}
