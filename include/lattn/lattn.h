// lattn/lattn.h — everything public in one include.
#pragma once

#include "lattn/check.h"
#include "lattn/config.h"
#include "lattn/device.h"
#include "lattn/dlpack_interop.h"
#include "lattn/dtype.h"
#include "lattn/errors.h"
#include "lattn/log.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"
#include "lattn/version.h"
#include "lattn/cache.h"
#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "lattn/backend.h"
#include "lattn/attention.h"
