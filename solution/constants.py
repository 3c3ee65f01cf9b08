"""Facts of the TpuGraphs on-disk format, named once for the whole package."""

NODE_FEAT_DIM = 140
LAYOUT_CONFIG_DIM = 18
TILE_CONFIG_DIM = 24
NUM_OPCODES = 121  # opcode ids 0..120; 0 means unknown

CONVOLUTION, DOT, RESHAPE = 26, 34, 75
CONFIGURABLE_OPCODES = (CONVOLUTION, DOT, RESHAPE)

# node_feat columns
LAYOUT_MINOR_TO_MAJOR = slice(134, 140)  # 0-padded in the files although 0 is a valid axis
SHAPE_DIMS = slice(21, 27)  # output shape dims 0..5
SHAPE_SUM, SHAPE_PRODUCT = 27, 28

# layout config: three 6-vectors (output, input, kernel) of values in -1..5
LAYOUT_GROUP = 6
LAYOUT_GROUPS = LAYOUT_CONFIG_DIM // LAYOUT_GROUP
LAYOUT_SYMBOLS = 7  # values -1..5

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
