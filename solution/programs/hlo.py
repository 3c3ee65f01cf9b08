"""Parse XLA HLO module text (JAX's `as_text(dialect="hlo")`, XLA's dump files) into computations of instructions."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# attributes whose values name computations (one name, or `{a, b}`)
CALLEE_KEYS = ("to_apply", "body", "condition", "calls", "select", "scatter", "true_computation",
               "false_computation", "branch_computations", "called_computations")
_CALLEES = frozenset(CALLEE_KEYS)
# tables that newer XLA prints before or after the computations (stack frames of the metadata): skipped
TRAILERS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
MODULE_SYNTAX = "HLO text as XLA prints it: 'HloModule <name>', then computations '<name> {' ... '}'"
INSTRUCTION_SYNTAX = "'[ROOT] <name> = <shape> <opcode>(<operands>), <key>=<value>, ...'"
SHAPE_SYNTAX = "a shape such as f32[8,128]{1,0}, pred[], or a tuple (s32[], f32[4]{0})"

_HEAD = re.compile(r"(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_ARRAY = re.compile(r"(pred|token|opaque|bf16|[suf]\d+|c64|c128|f\d+e\d+m\d+\w*)\[([^\]]*)\](\{[^}]*\})?")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[(){}\[\],]')  # strings whole, so that brackets in them are skipped
_FLAT_OPERANDS = r'([^()\[\]{}"]*)\)'  # operands without brackets or strings, and the closing ')'
# `, key=value` where value is a string, a bare word, or braces nested up to twice (other values: _split); the
# loops are unrolled (plain run, then special-and-plain runs) so that matching stays linear
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_PLAIN = r'[^{}"]*'
_INNER_BRACES = rf'\{{{_PLAIN}(?:{_STRING}{_PLAIN})*\}}'
_ATTRIBUTE = re.compile(rf'\s*,\s*([\w.\-]+)=({_STRING}|\{{{_PLAIN}(?:(?:{_STRING}|{_INNER_BRACES}){_PLAIN})*\}}'
                        r'|[^\s,{}"]*)')
# the common line in one match: an array shape and operand names only (others: the steps of _instruction)
_SIMPLE = re.compile(rf"{_HEAD.pattern}({_ARRAY.pattern})\s*([a-z][a-z0-9\-]*)\({_FLAT_OPERANDS}")
_COMMENT = re.compile(r"/\*.*?\*/")
_SLICE = re.compile(r"\[(-?\d+):(-?\d+)(?::(-?\d+))?\]")
_OPENERS, _CLOSERS = "({[", ")}]"


class HloError(ValueError):
    """HLO text that cannot be read; the message names the file, the line and what was expected."""

    def __init__(self, path: str | Path, line: int, found: str, expected: str) -> None:
        self.path, self.line = str(path), line
        super().__init__(f"{path} line {line}: {found}; expected {expected}")


@dataclass(frozen=True, slots=True)
class Shape:
    """An instruction's output shape, as far as the encoder reads it."""

    element_type: str  # 'f32', 'pred', ..., or 'tuple'
    dims: tuple[int, ...]  # [rank]; () for scalars and tuples
    tuple_size: int  # top-level elements of a tuple, 0 for an array
    minor_to_major: tuple[int, ...]  # the layout; () for scalars and tuples


@dataclass(slots=True)
class Instruction:
    """One instruction line."""

    name: str
    shape: Shape
    opcode: str
    operands: list[str]  # operand instruction names, in order
    attributes: dict[str, str]  # the raw text of each `key=value` after the operands
    callees: list[tuple[str, str]]  # (attribute, computation name) of every computation it calls
    line: int  # 1-based line in the file
    parameter_number: int = 0  # N of parameter(N); 0 for other opcodes


@dataclass
class Computation:
    """A named list of instructions with one root."""

    name: str
    instructions: list[Instruction]  # in the text's order
    root: Instruction  # the ROOT instruction (the last one where none is marked)
    line: int
    is_entry: bool


@dataclass
class Module:
    """A parsed HLO module."""

    name: str
    path: str
    computations: dict[str, Computation]  # in the text's order: callees first, the entry last
    entry: Computation


class Window(NamedTuple):
    """An XLA window, one entry per window dimension, defaults filled in as XLA's parser does."""

    size: list[int]
    stride: list[int]
    padding_low: list[int]
    padding_high: list[int]
    window_dilation: list[int]  # rhs_dilate
    base_dilation: list[int]  # lhs_dilate
    reversal: list[bool]  # rhs_reversal


class ConvDims(NamedTuple):
    """Convolution dimension numbers from `dim_labels=b01f_01io->b01f`: dimension indices by role."""

    input_batch: int
    input_feature: int
    input_spatial: list[int]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: list[int]
    output_batch: int
    output_feature: int


def read_module(path: str | Path) -> Module:
    """Parse the HLO text file at `path`."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise HloError(path, data[:error.start].count(b"\n") + 1, "bytes that are not UTF-8 text",
                       MODULE_SYNTAX) from None
    return parse_module(text, path)


def parse_module(text: str, path: str | Path = "<text>") -> Module:
    """Parse one module's text; `path` only names it in errors."""
    name, computations, current, defined = None, {}, None, set()
    number = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).strip() if "/*" in raw else raw.strip()
        if not line or line.startswith("//"):
            continue
        if current is not None:
            if line == "}":
                _close(current, path)
                computations[current.name] = current
                current = None
            else:
                _add(current, defined, *_instruction(line, number, path), path)
        elif name is None:
            name = _module_name(line, number, path)
        elif line in TRAILERS or line[0].isdigit():  # the stack-frame tables (before or after computations)
            continue
        else:
            current, defined = _open(line, number, path, computations), set()
    if name is None:
        raise HloError(path, max(number, 1), "no 'HloModule' line (an empty file)", MODULE_SYNTAX)
    if current is not None:
        raise HloError(path, number, f"the end of the file inside computation '{current.name}' (opened at line "
                       f"{current.line}): a truncated module", "'}' closing it")
    return Module(name, str(path), computations, _entry(computations, path, number))


def _module_name(line: str, number: int, path: str | Path) -> str:
    words = line.replace(",", " ").split()
    if words[0] != "HloModule" or len(words) < 2:
        raise HloError(path, number, f"'{line[:60]}' (not HLO text)", MODULE_SYNTAX)
    return words[1]


def _open(line: str, number: int, path: str | Path, seen: dict[str, Computation]) -> Computation:
    """A computation header: `name {`, `ENTRY %name (p: f32[]) -> f32[] {`."""
    is_entry = line.startswith("ENTRY ")
    head = re.match(r"%?([\w.\-]+)", line[6:].lstrip() if is_entry else line)
    if not line.endswith("{") or head is None:
        raise HloError(path, number, f"'{line[:60]}'", "a computation header '[ENTRY] <name> {' or the end of the "
                       "module")
    if head.group(1) in seen:
        raise HloError(path, number, f"a second computation named '{head.group(1)}'", "unique computation names")
    return Computation(head.group(1), [], None, number, is_entry)  # type: ignore[arg-type]  # root set on '}'


def _close(computation: Computation, path: str | Path) -> None:
    if not computation.instructions:
        raise HloError(path, computation.line, f"computation '{computation.name}' has no instructions",
                       "at least one instruction")
    if computation.root is None:
        computation.root = computation.instructions[-1]


def _add(computation: Computation, defined: set[str], instruction: Instruction, is_root: bool,
         path: str | Path) -> None:
    """Append an instruction whose operands are all defined above it in the same computation."""
    for operand in instruction.operands:
        if operand not in defined:
            raise HloError(path, instruction.line, f"operand '{operand}' of '{instruction.name}' is not defined "
                           f"above it in computation '{computation.name}'", "operands defined before their use")
    if instruction.name in defined:
        raise HloError(path, instruction.line, f"a second instruction named '{instruction.name}'",
                       "unique instruction names")
    defined.add(instruction.name)
    computation.instructions.append(instruction)
    if is_root:
        computation.root = instruction


def _entry(computations: dict[str, Computation], path: str | Path, last: int) -> Computation:
    """The ENTRY computation, once every called computation is known to exist."""
    for computation in computations.values():
        for instruction in computation.instructions:
            for _, callee in instruction.callees:
                if callee not in computations:
                    raise HloError(path, instruction.line, f"'{instruction.name}' calls computation '{callee}', "
                                   "which the module does not define", "a computation defined in the module")
    entries = [c for c in computations.values() if c.is_entry]
    if len(entries) != 1:
        raise HloError(path, last, f"{len(entries)} ENTRY computations", "exactly one 'ENTRY <name> {'")
    return entries[0]


def _instruction(line: str, number: int, path: str | Path) -> tuple[Instruction, bool]:
    """One instruction line, `[ROOT] name = shape opcode(operands), key=value, ...`, and whether it is the ROOT."""
    simple = _SIMPLE.match(line)
    shape = _shape(simple.group(3)) if simple else None
    if shape is not None:
        is_root, name, kind, operands = simple.group(1, 2, 7, 8)
        words, end = operands.replace(" ", "").replace("%", "").split(","), simple.end()
    else:
        is_root, name, shape, kind, words, end = _instruction_parts(line, number, path)
    attributes = _attributes(line, end, number, path)
    callees = [] if _CALLEES.isdisjoint(attributes) else [
        (key, callee) for key in CALLEE_KEYS if key in attributes for callee in _names(attributes[key])]
    instruction = Instruction(name, shape, kind, [], attributes, callees, number)
    if kind == "parameter":
        instruction.parameter_number = _int(words[0], number, path, "parameter(<number>)")
    elif kind != "constant" and words != [""]:  # a constant's parentheses hold its literal, not operands
        instruction.operands = words
    return instruction, bool(is_root)


def _instruction_parts(line: str, number: int, path: str | Path) -> tuple[str | None, str, Shape, str, list[str], int]:
    """ROOT marker, name, shape, opcode, operand words and the index after the operands of any instruction line."""
    head = _HEAD.match(line)
    if head is None:
        raise HloError(path, number, f"'{line[:60]}'", f"an instruction {INSTRUCTION_SYNTAX} or '}}'")
    shape, pos = _shape_at(line, head.end(), number, path)
    opcode = _OPCODE.match(line, pos)
    if opcode is None:
        raise HloError(path, number, f"'{line[pos:pos + 30].strip()}' after the shape", "an opcode and '('")
    pieces, end = _split(line, opcode.end())
    if end < 0:
        raise HloError(path, number, "no ')' closing the operands (a truncated line)", INSTRUCTION_SYNTAX)
    words = [p.split()[-1].lstrip("%") if p.strip() else "" for p in pieces]  # `f32[2]{0} %a` in older dumps
    return head.group(1), head.group(2), shape, opcode.group(1), words, end


def _shape_at(line: str, pos: int, number: int, path: str | Path) -> tuple[Shape, int]:
    """The shape that starts at `pos` and the index after it."""
    if line.startswith("(", pos):
        _, end = _split(line, pos + 1)
        shape = _shape(line[pos:end]) if end > 0 else None
    else:
        match = _ARRAY.match(line, pos)
        end = match.end() if match else -1
        shape = _shape(match.group()) if match else None
    if shape is None:
        raise HloError(path, number, f"shape '{line[pos:].split(' ', 1)[0][:60]}' does not parse", SHAPE_SYNTAX)
    return shape, end


@functools.lru_cache(maxsize=4096)
def _shape(text: str) -> Shape | None:
    """The Shape of `f32[2,3]{1,0}` or of a tuple `(s32[], f32[2]{0})`; None where it does not parse."""
    if text.startswith("("):
        pieces, end = _split(text, 1)
        elements = [p.strip() for p in pieces]
        if end != len(text) or (elements != [""] and any(_shape(e) is None for e in elements)):
            return None
        return Shape("tuple", (), 0 if elements == [""] else len(elements), ())
    match = _ARRAY.fullmatch(text)
    if match is None:
        return None
    element_type, dims, layout = match.groups()
    try:
        sizes = tuple(_dimension(d) for d in dims.split(",")) if dims.strip() else ()
        order = layout[1:-1].split(":")[0] if layout else None
        minor_to_major = tuple(int(d) for d in order.split(",") if d.strip()) if order is not None else None
    except ValueError:
        return None
    if minor_to_major is None:  # no layout printed: XLA's parser gives the default, major-to-minor
        minor_to_major = tuple(range(len(sizes) - 1, -1, -1))
    return Shape(element_type, sizes, 0, minor_to_major)


def _dimension(text: str) -> int:
    """A dimension size: `8`, a bounded dynamic `<=8` (its bound), an unbounded `?` (-1)."""
    text = text.strip()
    return -1 if text == "?" else int(text.removeprefix("<="))


def _split(text: str, pos: int) -> tuple[list[str], int]:
    """Split `text[pos:]` at its top-level commas up to the bracket that closes the one opened before `pos`;
    return the pieces and the index after that bracket (-1 where none closes it)."""
    depth, start, pieces = 0, pos, []
    for token in _TOKENS.finditer(text, pos):
        char = text[token.start()]
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            if depth == 0:
                pieces.append(text[start:token.start()])
                return pieces, token.end()
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:token.start()])
            start = token.end()
    pieces.append(text[start:])
    return pieces, -1


def _attributes(line: str, pos: int, number: int, path: str | Path) -> dict[str, str]:
    """`, key=value, key={...}` after the operands, as raw value text by key."""
    attributes, end = {}, pos
    match = _ATTRIBUTE.match(line, end)
    while match:
        attributes[match.group(1)] = match.group(2)
        end = match.end()
        match = _ATTRIBUTE.match(line, end)
    return attributes if end == len(line) else _split_attributes(line, pos, number, path)


def _split_attributes(line: str, pos: int, number: int, path: str | Path) -> dict[str, str]:
    """`_attributes` where the values hold deeper brackets or commas outside braces: split at top-level commas."""
    rest = line[pos:].strip()
    if not rest:
        return {}
    pieces, end = _split(rest + ")", 1) if rest.startswith(",") else ([], -1)
    if end != len(rest) + 1:
        raise HloError(path, number, f"'{rest[:40]}' after the operands (unbalanced brackets or a truncated line)",
                       "', <key>=<value>' attributes")
    attributes = {}
    for piece in pieces:
        key, equals, value = piece.partition("=")
        if not equals:
            raise HloError(path, number, f"attribute '{piece.strip()[:40]}'", "<key>=<value>")
        attributes[key.strip()] = value.strip()
    return attributes


def _names(value: str) -> list[str]:
    """Computation names of `name`, `%name` or `{a, %b}`."""
    return [n.strip().lstrip("%") for n in value.strip("{}").split(",") if n.strip()]


def _int(text: str, number: int, path: str | Path, expected: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HloError(path, number, f"'{text.strip()[:30]}' is not a number", expected) from None


# ---------------------------------------------------------------- attribute values


def ints(value: str) -> list[int]:
    """`{0,1}`, `{}` or `3` as integers."""
    return [int(v) for v in value.strip("{}").split(",") if v.strip()]


def window(value: str) -> Window:
    """`{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=1x1 rhs_reversal=0x1}`."""
    fields = dict(item.split("=", 1) for item in value.strip("{}").split())
    sizes = [int(v) for v in fields["size"].split("x")] if "size" in fields else []

    def each(key: str, default: int) -> list[int]:
        return [int(v) for v in fields[key].split("x")] if key in fields else [default] * len(sizes)

    pads = [p.split("_") for p in fields["pad"].split("x")] if "pad" in fields else [["0", "0"]] * len(sizes)
    return Window(sizes, each("stride", 1), [int(p[0]) for p in pads], [int(p[1]) for p in pads],
                  each("rhs_dilate", 1), each("lhs_dilate", 1), [bool(r) for r in each("rhs_reversal", 0)])


def conv_dims(value: str) -> ConvDims:
    """`b01f_01io->b01f`: the position of each role letter; spatial dimensions by their digit."""
    lhs, rest = value.split("_", 1)
    kernel, out = rest.split("->")

    def spatial(labels: str) -> list[int]:
        return [labels.index(str(i)) for i in range(sum(c.isdigit() for c in labels))]

    return ConvDims(lhs.index("b"), lhs.index("f"), spatial(lhs), kernel.index("i"), kernel.index("o"),
                    spatial(kernel), out.index("b"), out.index("f"))


def slices(value: str) -> list[tuple[int, int, int]]:
    """`{[0:2], [1:6:2]}` as (start, limit, stride) per dimension."""
    found = [(int(a), int(b), int(c or 1)) for a, b, c in _SLICE.findall(value)]
    if len(found) != value.count("["):
        raise ValueError(f"slice {value}")
    return found


def padding(value: str) -> list[tuple[int, int, int]]:
    """`0_0x1_2_1` as (low, high, interior) per dimension."""
    dims = [[int(v) for v in d.split("_")] for d in value.split("x")]
    return [(d[0], d[1], d[2] if len(d) > 2 else 0) for d in dims]
