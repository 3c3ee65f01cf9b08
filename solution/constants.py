"""Facts of the TpuGraphs data named once for the whole package: opcodes, tiles, padding, splits, collections (the
format's column map is solution/format.py)."""

NUM_OPCODES = 121  # opcode ids 0..120; 0 means unknown

CONVOLUTION, DOT, RESHAPE = 26, 34, 75
CONFIGURABLE_OPCODES = (CONVOLUTION, DOT, RESHAPE)

LANES, SUBLANES = 128, 8  # a TPU stores a tensor in 8 x 128 tiles over its two most-minor dimensions

PAD = -1  # padding value of every batched tensor; 0 is a valid feature value

SPLITS = ("train", "valid", "test")
COLLECTIONS = (
    "tile:xla",
    "layout:xla:random",
    "layout:xla:default",
    "layout:nlp:random",
    "layout:nlp:default",
)
