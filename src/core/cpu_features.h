/* cpu_features.h — which ISA paths this CPU and OS allow (cpuid + xgetbv), computed once. */
#ifndef MOQ_CORE_CPU_FEATURES_H
#define MOQ_CORE_CPU_FEATURES_H
#include "moq.h"
#endif
