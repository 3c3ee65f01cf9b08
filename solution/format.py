"""The official TpuGraphs format's column map, named once: node_feat's columns, the layout config's blocks of 6, and
the element types with their byte sizes, and the opcode ids (format.md; the official encoder's featurizers.h and
hlo_opcode.h)."""

NODE_FEAT_DIM = 140
LAYOUT_CONFIG_DIM = 18
TILE_CONFIG_DIM = 24

# node_feat columns (format.md); a sequence block holds `lead` values, then their sum and product
IS_ROOT, ELEMENT_TYPE, SHAPE, TUPLE_SIZE, PARAMETER = 0, 2, 21, 29, 30
DIMENSIONS = 31
WINDOW, REVERSAL = 37, 85  # six blocks of 8: size, stride, padding low/high, window/base dilation; reversal 6 + 2
CONV = 93  # 14 dimension numbers, then feature and batch group counts at 107, 108
SLICE, DYNAMIC_SLICE, PADDING = 109, 121, 125  # blocks of 4: slice start/stride/limit; sizes; padding low/high
IS_STABLE, LAYOUT = 133, 134
EMPTY_PRODUCT_COLUMNS = (*range(WINDOW + 7, REVERSAL, 8), *range(SLICE + 3, IS_STABLE, 4))  # product of nothing: 1
SHAPE_DIMS = slice(SHAPE, SHAPE + 6)  # output shape dims 0..5
SHAPE_SUM, SHAPE_PRODUCT = SHAPE + 6, SHAPE + 7

# layout config: three blocks of 6 (output, input, kernel) of values in -1..5; node_feat's own layout is one block
LAYOUT_GROUP = 6
LAYOUT_GROUPS = LAYOUT_CONFIG_DIM // LAYOUT_GROUP
LAYOUT_SYMBOLS = 7  # values -1..5
LAYOUT_MINOR_TO_MAJOR = slice(LAYOUT, LAYOUT + LAYOUT_GROUP)  # 0-padded in the files although 0 is a valid axis

# tile config: kernel, output and input bounds, each 6 dims + sum + product; the output bounds follow the output dims
TILE_OUTPUT_BOUNDS = slice(8, 14)

# one-hot columns 2..20 of the element type (featurizers.h's order; invalid never comes from text)
ELEMENT_TYPES = ("invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
                 "bf16", "c64", "c128", "tuple", "opaque", "token")
ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
                 "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}  # bytes per element of each array type

# opcode name of each official id (hlo_opcode.h); "" where no opcode has the id; 97 and 101 are tombstones
OPCODE_NAMES = (
    "", "abs", "add", "add-dependency", "after-all", "all-reduce", "all-to-all", "atan2", "batch-norm-grad",
    "batch-norm-inference", "batch-norm-training", "bitcast", "bitcast-convert", "broadcast", "call", "ceil",
    "cholesky", "clamp", "collective-permute", "count-leading-zeros", "compare", "complex", "concatenate",
    "conditional", "constant", "convert", "convolution", "copy", "copy-done", "copy-start", "cosine", "custom-call",
    "divide", "domain", "dot", "dynamic-slice", "dynamic-update-slice", "exponential", "exponential-minus-one",
    "fft", "floor", "fusion", "gather", "get-dimension-size", "set-dimension-size", "get-tuple-element", "imag",
    "infeed", "iota", "is-finite", "log", "log-plus-one", "and", "not", "or", "xor", "map", "maximum", "minimum",
    "multiply", "negate", "outfeed", "pad", "parameter", "partition-id", "popcnt", "power", "real", "recv",
    "recv-done", "reduce", "reduce-precision", "reduce-window", "remainder", "replica-id", "reshape", "reverse",
    "rng", "rng-get-and-update-state", "rng-bit-generator", "round-nearest-afz", "rsqrt", "scatter", "select",
    "select-and-scatter", "send", "send-done", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "sign", "sine", "slice", "sort", "sqrt", "subtract", "tanh", "trace", "transpose", "triangular-solve", "tuple",
    "tuple-select", "while", "cbrt", "all-gather", "collective-permute-start", "collective-permute-done",
    "logistic", "dynamic-reshape", "all-reduce-start", "all-reduce-done", "reduce-scatter", "all-gather-start",
    "all-gather-done", "opt-barrier", "async-start", "async-update", "async-done", "round-nearest-even",
    "stochastic-convert", "tan",
)
OPCODE_IDS = {name: i for i, name in enumerate(OPCODE_NAMES) if name}
