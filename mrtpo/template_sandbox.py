"""The sandbox chat templates are compiled in: each operation that can build a large text or list
is refused, from sizes computed before the allocation, when it would pass `MAX_RENDERED_CHARS`
(or build a number over `MAX_NUMBER_BITS` bits). `mrtpo.chat.render_chat` is the one caller.

The syntax tree does not show values that variables carry: `{% set n = 30000 %}{{ 'x' * n * n }}`
holds no large constant, and its repeat is one C call that the CPU timer cannot interrupt (the
signal waits for it to end, 900 MB later). So templates are compiled in `bounded_sandbox()`,
transformers' sandbox with `*`, `**` and `+` checked before they run (`binop_problem`): a text
or list longer than `MAX_RENDERED_CHARS`, or a whole number over `MAX_NUMBER_BITS` bits, is
refused in the same one line as the other refusals (`use_bounded_sandbox` says how it is put
into transformers, which builds its environment itself).

Operators are not the only single calls that build without bound, nor is the output cap enough
when it is checked after the whole text was joined: `'%*s' % (n, 'x')`, `'{:>300000000}'.format(x)`,
`'x'.ljust(n)`, `s.replace('x', s)`, `'x'|center(n)`, `l|tojson(indent=n)`, `ns.s ~ ns.s` in a
loop and a loop that prints one large text many times each reached gigabytes before any check
(issue 40, item 5, second round). So `bounded_sandbox()` also checks `%`, `~`, `{{ value }}`,
str methods' and filters' size arguments, str.format's fields, and counts the output as it is
produced; each refusal is computed from sizes before the allocation (`text_size`,
`percent_size`, `method_size`, `filter_size`).
"""
from __future__ import annotations

import contextvars
import functools
import logging
import re
from typing import Any

#: characters a rendered prompt may have (far above any model's context); also the longest
#: text or list one operation of a template may build
MAX_RENDERED_CHARS = 16 << 20
#: bits of the largest whole number a product or power in a template may build (about 19,700
#: digits: more than Python prints, and far more than a width or a count needs)
MAX_NUMBER_BITS = 1 << 16
#: characters all the texts and lists one render builds may add up to: each operation is held
#: under MAX_RENDERED_CHARS, and this bounds many of them kept at once (a loop storing a new
#: 16M-character text per round in a dict); real templates build a few times their output
MAX_BUILT_CHARS = 4 * MAX_RENDERED_CHARS

_built = contextvars.ContextVar("mrtpo_template_built", default=0)  # characters built by this render

log = logging.getLogger(__name__)


class TemplateRefused(ValueError):
    """An operation `bounded_sandbox()` does not run, raised from inside a render (the message
    says what it would have built); render_chat turns it into a ChatTemplateError."""


_SEQUENCES = (str, bytes, list, tuple)


def binop_problem(operator: str, left: Any, right: Any) -> str | None:
    """Why `left <operator> right` in a template would build too much (None if it would not),
    judged from the operands' sizes before it runs: a repeat (`*`) or concatenation (`+`) of a
    text or list longer than MAX_RENDERED_CHARS, a product or power (`*`, `**`) of whole
    numbers over MAX_NUMBER_BITS bits, or a `%` format whose widths, precisions and arguments
    add up to more than MAX_RENDERED_CHARS (`percent_size`)."""
    if operator == "*":
        seq, count = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(seq, _SEQUENCES) and isinstance(count, int):
            if len(seq) * count > MAX_RENDERED_CHARS:
                what, unit = ("a text", "character(s)") if isinstance(seq, str | bytes) else ("a list", "item(s)")
                return (f"it repeats {what} of {len(seq):,} {unit} {count:,} times, more than the "
                        f"{MAX_RENDERED_CHARS:,} characters a prompt may have")
        elif isinstance(left, int) and isinstance(right, int):
            if abs(left).bit_length() + abs(right).bit_length() > MAX_NUMBER_BITS:
                return f"it multiplies whole numbers into one of over {MAX_NUMBER_BITS:,} bits"
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 \
                and (abs(left).bit_length() - 1) * right > MAX_NUMBER_BITS:
            return f"it raises {left:,} to the power {right:,}: a number of over {MAX_NUMBER_BITS:,} bits"
    elif operator == "+":
        if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES) \
                and len(left) + len(right) > MAX_RENDERED_CHARS:
            return (f"it joins two values into one of {len(left) + len(right):,} characters or items, more "
                    f"than the {MAX_RENDERED_CHARS:,} characters a prompt may have")
    elif operator == "%":
        if isinstance(left, str | bytes):
            return _too_long("a %-format", percent_size(left, right))
    return None


def spend(what: str, size: int) -> None:
    """Charge `size` characters that `what` is about to build to this render's MAX_BUILT_CHARS
    (reset by each BoundedTemplate render); TemplateRefused once they add up past it."""
    total = _built.get() + max(0, size)
    _built.set(total)
    if total > MAX_BUILT_CHARS:
        raise TemplateRefused(f"{what} would bring what the template built on one prompt to {total:,} "
                              f"characters, over the {MAX_BUILT_CHARS:,} one render may build")


def binop_size(operator: str, left: Any, right: Any) -> int:
    """About how many characters or items `left operator right` builds (0 for numbers), for `spend`."""
    if operator == "*":
        seq, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
        if isinstance(seq, _SEQUENCES) and isinstance(count, int):
            return len(seq) * max(0, count)
    elif operator == "+" and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        return len(left) + len(right)
    elif operator == "%" and isinstance(left, str | bytes):
        return percent_size(left, right)
    return 0


def _too_long(what: str, size: int) -> str | None:
    """The refusal for `what` building `size` characters, if that is over MAX_RENDERED_CHARS."""
    if size > MAX_RENDERED_CHARS:
        return (f"{what} would build {size:,} characters or more, over the {MAX_RENDERED_CHARS:,} "
                "a prompt may have")
    return None


def text_size(value: Any, limit: int = MAX_RENDERED_CHARS) -> int:
    """About how many characters `str(value)` has, counted without building it (a container by
    its items, each shared one once per appearance, as its text repeats it), so a size check can
    run before the conversion. Counting stops soon after `limit`. An estimate within the small
    factor escapes add (a quote, a backslash), which is all a bound needs; a value too deeply
    nested to walk counts 0 (its str() raises RecursionError itself)."""
    from jinja2.runtime import Undefined
    from jinja2.utils import Namespace

    seen: dict[int, int] = {}

    def size(v: Any, nested: bool) -> int:
        if isinstance(v, str | bytes):
            return len(v) + (3 if nested else 0)
        if v is None or isinstance(v, bool | float):
            return 25
        if isinstance(v, int):
            return v.bit_length() * 3 // 10 + 2
        if isinstance(v, Undefined):
            return 0
        if isinstance(v, Namespace):
            v = object.__getattribute__(v, "_Namespace__attrs")
        if not isinstance(v, list | tuple | set | frozenset | dict):
            return 100  # an object's own text: a repr such as <Macro ...>
        if id(v) in seen:
            return seen[id(v)]
        seen[id(v)] = 5  # a cycle prints as [...]
        total = 2
        for item in (v.items() if isinstance(v, dict) else v):
            total += 2 + (size(item[0], True) + size(item[1], True) if isinstance(v, dict) else size(item, True))
            if total > limit:
                break
        seen[id(v)] = total
        return total

    try:
        return size(value, False)
    except RecursionError:
        return 0


def _number(value: Any) -> int:
    """A width, precision or count as the int it means (0 for what is none; a number written
    with more than 18 digits as 10**18, without converting it)."""
    if isinstance(value, str) and value.isdigit():
        return int(value) if len(value) <= 18 else 10 ** 18
    if isinstance(value, int):
        return abs(value)
    return 0


#: one %-format specifier: (mapping key, width, precision, conversion)
_PERCENT_SPEC = re.compile(r"%(?:\(([^)]*)\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)


def percent_size(fmt: str | bytes, args: Any) -> int:
    """An upper bound on the length of `fmt % args`, from the format's literal text, each
    specifier's width and precision (written in it or taken from `args` by `*`) and each
    argument's text_size (a float formatted with %f may print 309 digits): `'%300000000s' % 'x'`
    is 300 million characters before Python builds it."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    positional = list(args) if isinstance(args, tuple) else [args]
    mapping = args if isinstance(args, dict) else None
    taken = 0
    total = len(text)

    def take() -> Any:
        nonlocal taken
        taken += 1
        return positional[taken - 1] if taken <= len(positional) else None

    for spec in _PERCENT_SPEC.finditer(text):
        key, width, precision, conversion = spec.groups()
        if conversion == "%":
            continue
        width = take() if width == "*" else width
        precision = take() if precision == "*" else precision
        value = mapping.get(key) if key is not None and mapping is not None else take()
        total += _number(width) + _number(precision) + text_size(value) + (310 if isinstance(value, float) else 0)
        if total > MAX_RENDERED_CHARS:
            break
    return total


def spec_size(format_spec: str) -> int:
    """The largest number written in a str.format field's spec (its width or precision, or a
    digit used as fill, which is smaller): `'{:>300000000}'` pads to 300 million characters."""
    return max((_number(n) for n in re.findall(r"\d+", format_spec)), default=0)


def method_size(method: Any, args: tuple, kwargs: dict) -> int | None:
    """An upper bound on the length of the text a call of a str (or bytes) method, or of a global
    that writes text, returns, from its arguments (None for calls that build nothing bigger than
    their inputs): `'x'.ljust(n)` is n characters, `s.replace(a, b)` grows by len(b) - len(a) per
    match, `sep.join(items)` is the items and the separators."""
    name = getattr(method, "__name__", "")
    owner = getattr(method, "__self__", None)
    if not isinstance(owner, str | bytes):
        if name == "generate_lorem_ipsum":  # lipsum(n, html, min, max): up to `max` words a paragraph
            n = _number(args[0] if args else kwargs.get("n", 5))
            most = _number(args[3] if len(args) > 3 else kwargs.get("max", 100))
            return n * (most + 1) * 16
        if name == "strftime_now":  # a directive such as %c prints up to ~30 characters
            fmt = args[0] if args else kwargs.get("format", "")
            return len(fmt) * 16 if isinstance(fmt, str) else None
        return None
    first = args[0] if args else None
    if name in ("ljust", "rjust", "center", "zfill"):
        return max(len(owner), _number(first if args else kwargs.get("width")))
    if name == "expandtabs":
        tab = _number(first if args else kwargs.get("tabsize", 8))
        return len(owner) + owner.count("\t" if isinstance(owner, str) else b"\t") * tab
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str | bytes) and isinstance(args[1], str | bytes):
        old, new = args[0], args[1]
        limit = args[2] if len(args) > 2 else kwargs.get("count", -1)
        found = len(owner) + 1 if not old else owner.count(old)
        if isinstance(limit, int) and limit >= 0:
            found = min(found, limit)
        return len(owner) + found * max(0, len(new) - len(old))
    if name == "join" and isinstance(first, list | tuple):
        return sum(text_size(item) for item in first) + len(owner) * max(0, len(first) - 1)
    if name == "translate" and isinstance(first, dict):
        longest = max((len(v) for v in first.values() if isinstance(v, str | bytes)), default=1)
        return len(owner) * max(1, longest)
    return None


def bounded_list(items: Any, what: str) -> list:
    """`list(items)` for a lazy sequence (a map or select filter), refused once the items' texts
    pass MAX_RENDERED_CHARS (an item counting at least 8, its pointer): each item may be newly
    built (`big|map('upper')`), so the list could hold gigabytes before a check of the whole."""
    out, total = [], 0
    for item in items:
        total += max(8, text_size(item))  # an item holds at least a pointer
        if total > MAX_RENDERED_CHARS:
            raise TemplateRefused(_too_long(what, total))
        out.append(item)
    return out


#: filters that turn their whole input into a text (their output's size is about the input's)
_TEXT_FILTERS = frozenset({"string", "pprint", "e", "escape", "forceescape", "safe", "upper", "lower", "title",
                           "capitalize", "trim", "striptags", "urlencode", "urlize", "truncate", "wordcount"})
#: filters that make a list of their whole input (a lazy one is materialized by bounded_list)
_LISTING_FILTERS = frozenset({"list", "join", "sort", "unique", "reverse", "batch", "slice", "sum", "dictsort",
                              "groupby", "min", "max", "random", "last", "length", "count", "tojson"})


def filter_size(name: str, value: Any, arguments: dict) -> int:
    """An upper bound on the length of what the filter `name` builds from `value` and its other
    `arguments` (by parameter name), for the filters whose size an argument sets: `center(width)`,
    `indent(width)` per line, `wordwrap`'s `wrapstring` per line, `format`, `join`, `tojson`'s indent
    per item and level, `replace`, `batch` and `slice` counts, `sum` of lists; other filters'
    output is about their input's text_size."""
    if name == "center":
        return max(text_size(value), _number(arguments.get("width")))
    if name == "indent":
        width = arguments.get("width")
        per_line = len(width) if isinstance(width, str) else _number(width)
        return text_size(value) + (str(value).count("\n") + 1 if isinstance(value, str) else 1) * per_line
    if name == "wordwrap" and isinstance(value, str):
        wrap = arguments.get("wrapstring")
        lines = len(value) // max(1, _number(arguments.get("width"))) + value.count("\n") + 1
        return len(value) + lines * (len(wrap) if isinstance(wrap, str) else 2)
    if name == "format" and isinstance(value, str):
        return percent_size(value, arguments.get("kwargs") or tuple(arguments.get("args") or ()))
    if name == "join":
        sep = arguments.get("d", "")
        items = value if isinstance(value, list | tuple | str) else []
        return text_size(items) + (len(sep) if isinstance(sep, str) else 0) * len(items)
    if name == "tojson":
        indent = arguments.get("indent")
        step = len(indent) if isinstance(indent, str) else _number(indent)
        separators = arguments.get("separators")
        extra = sum(len(s) for s in separators if isinstance(s, str)) if isinstance(separators, list | tuple) else 2
        items, depth = _json_layout(value)
        return text_size(value) + items * (depth * step + extra + 1)
    if name == "replace" and isinstance(value, str):
        old, new, count = arguments.get("old"), arguments.get("new"), arguments.get("count")
        if isinstance(old, str) and isinstance(new, str):
            return method_size(value.replace, (old, new, -1 if count is None else count), {})
    if name in ("batch", "slice"):
        count = _number(arguments.get("linecount" if name == "batch" else "slices"))
        return (len(value) if isinstance(value, list | tuple | str) else 0) + count
    if name == "sum" and isinstance(value, list | tuple):
        return sum(len(item) for item in value if isinstance(item, list | tuple | str))
    if name in _TEXT_FILTERS:
        return text_size(value)
    return 0


def _json_layout(value: Any) -> tuple[int, int]:
    """(how many values, how deeply nested) `value` is as JSON, each shared list or dict counted
    once per appearance (`[[1] * 100] * 100` is 10,101 values): tojson(indent) writes an indent
    per level on each value's line. Too deep to walk: (0, 0), json.dumps raises itself."""
    seen: dict[int, tuple[int, int]] = {}

    def layout(item: Any) -> tuple[int, int]:
        if not isinstance(item, list | tuple | dict):
            return 1, 0
        if id(item) in seen:
            return seen[id(item)]
        seen[id(item)] = (1, 0)  # a cycle: json.dumps refuses it
        count, deepest = 1 + (len(item) if isinstance(item, dict) else 0), 0
        for child in (item.values() if isinstance(item, dict) else item):
            n, d = layout(child)
            count, deepest = count + n, max(deepest, d + 1)
            if count > MAX_RENDERED_CHARS:
                break
        seen[id(item)] = (count, deepest)
        return count, deepest

    try:
        return layout(value)
    except RecursionError:
        return 0, 0


def _bounded_filter(name: str, func: Any) -> Any:
    """`func`, the filter `name`, with filter_size checked before it runs (a lazy input to a
    filter that lists it is listed by bounded_list first); the same result otherwise."""
    import inspect

    from jinja2.utils import _PassArg

    try:
        signature = inspect.signature(func)  # the function it wraps, for jinja2's async variants
    except (TypeError, ValueError):
        return func
    skip = 1 if _PassArg.from_obj(func) is not None else 0  # the value's place in the call
    # an async variant of a filter that takes no context is called with one it drops
    dropped = skip - (1 if _PassArg.from_obj(inspect.unwrap(func)) is not None else 0)

    @functools.wraps(func)
    def bounded(*args, **kwargs):
        if len(args) > skip and name in _LISTING_FILTERS and not isinstance(args[skip], _SEQUENCES + (dict, set)) \
                and hasattr(args[skip], "__iter__"):
            args = (*args[:skip], bounded_list(args[skip], f"the {name} filter's input"), *args[skip + 1:])
        try:
            bound = signature.bind(*args[dropped:], **kwargs)
        except TypeError:
            return func(*args, **kwargs)  # its own error, as before
        bound.apply_defaults()
        values = list(bound.arguments.values())
        if len(values) > skip - dropped:
            value = values[skip - dropped]
            size = filter_size(name, value, bound.arguments)
            problem = _too_long(f"the {name} filter", size)
            if problem:
                raise TemplateRefused(problem)
            spend(f"the {name} filter", size)
        return func(*args, **kwargs)

    bounded.bounded_filter = True
    return bounded


@functools.cache
def bounded_sandbox() -> type:
    """The environment chat templates are compiled in: jinja2's ImmutableSandboxedEnvironment
    (transformers' choice) in which every operation that can build a large text or list checks
    its size before it runs and raises `TemplateRefused` when it is over MAX_RENDERED_CHARS:

    - the operators `*`, `**`, `+` and `%` (`binop_problem`);
    - `~` (a bounded join instead of jinja2's str_join, the same text and markup);
    - `{{ value }}` (its text_size before str());
    - calls of str methods and text-writing globals (`method_size`: ljust, center, zfill,
      expandtabs, replace, join, translate; lipsum, strftime_now), and str.format / format_map
      (each field's spec and the running total);
    - the filters (`filter_size`), also those set after the environment is made (transformers
      sets its own tojson);
    - the output: what the template yields is counted as it comes (render's join and every
      block's, macro's and generate()'s), and refused at the cap before it is all joined.

    Each of those also charges what it builds to the render's MAX_BUILT_CHARS (`spend`), so that
    many operations each under the cap cannot keep gigabytes between them. Otherwise the same
    operations, so real templates render the same text. (A class made on
    first use: jinja2 is imported only when a template is rendered.)"""
    from jinja2.compiler import CodeGenerator, optimizeconst
    from jinja2.environment import Template
    from jinja2.runtime import markup_join, str_join
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter

    class BoundedFilters(dict):
        """An environment's filters, each wrapped by _bounded_filter as it is set."""

        def __setitem__(self, name, func):
            if callable(func) and not getattr(func, "bounded_filter", False):
                func = _bounded_filter(name, func)
            super().__setitem__(name, func)

        def update(self, *args, **kwargs):
            for name, func in dict(*args, **kwargs).items():
                self[name] = func

    class BoundedCodeGenerator(CodeGenerator):
        """jinja2's code generator with `~` joined by the environment's bounded_concat and each
        `{{ value }}` passed through its checked_output before str()."""

        @optimizeconst
        def visit_Concat(self, node, frame):
            if frame.eval_ctx.volatile:
                markup = "context.eval_ctx.autoescape"
            else:
                markup = "True" if frame.eval_ctx.autoescape else "False"
            self.write("environment.bounded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write(f"), {markup})")

        def _output_child_pre(self, node, frame, finalize):
            super()._output_child_pre(node, frame, finalize)
            self.write("environment.checked_output(")

        def _output_child_post(self, node, frame, finalize):
            self.write(")")
            super()._output_child_post(node, frame, finalize)

    class BoundedTemplate(Template):
        """A template whose generate() stops at MAX_RENDERED_CHARS of output."""

        def render(self, *args, **kwargs):
            token = _built.set(0)  # each render has its own MAX_BUILT_CHARS
            try:
                return super().render(*args, **kwargs)
            finally:
                _built.reset(token)

        def generate(self, *args, **kwargs):
            token, total = _built.set(0), 0
            try:
                for piece in super().generate(*args, **kwargs):
                    total += len(piece)
                    if total > MAX_RENDERED_CHARS:
                        raise TemplateRefused(_too_long("its output", total))
                    yield piece
            finally:
                _built.reset(token)

    class BoundedFormatterMixin:
        """str.format's formatter, refusing a field whose spec or text would pass the cap."""

        def vformat(self, format_string, args, kwargs):
            self.built = len(format_string)
            return super().vformat(format_string, args, kwargs)

        def convert_field(self, value, conversion):
            if conversion is not None:
                self._charge(text_size(value), "a str.format conversion")
            return super().convert_field(value, conversion)

        def format_field(self, value, format_spec):
            self._charge(max(spec_size(format_spec), text_size(value)) + (310 if isinstance(value, float) else 0),
                         "a str.format")
            out = super().format_field(value, format_spec)
            self.built += len(out)
            return out

        def _charge(self, size, what):
            problem = _too_long(what, getattr(self, "built", 0) + size)
            if problem:
                raise TemplateRefused(problem)

    class BoundedFormatter(BoundedFormatterMixin, SandboxedFormatter):
        pass

    class BoundedEscapeFormatter(BoundedFormatterMixin, SandboxedEscapeFormatter):
        pass

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})
        code_generator_class = BoundedCodeGenerator
        template_class = BoundedTemplate

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            plain, self.filters = self.filters, BoundedFilters()
            self.filters.update(plain)

        def call_binop(self, context, operator, left, right):
            problem = binop_problem(operator, left, right)
            if problem is not None:
                raise TemplateRefused(problem)
            spend(f"the operator {operator}", binop_size(operator, left, right))
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own signature
            if getattr(__obj, "__name__", "") == "join" and isinstance(getattr(__obj, "__self__", None), str | bytes) \
                    and args and not isinstance(args[0], list | tuple):
                args = (bounded_list(args[0], "a join"), *args[1:])
            size = method_size(__obj, args, kwargs)
            what = f"a call of {getattr(__obj, '__name__', 'a function')}"
            problem = _too_long(what, size or 0)
            if problem:
                raise TemplateRefused(problem)
            spend(what, size or 0)
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value):
            wrapper = super().wrap_str_format(value)
            if wrapper is None:
                return None
            from markupsafe import Markup

            owner = value.__self__
            formatter = BoundedEscapeFormatter(self, escape=owner.escape) if isinstance(owner, Markup) \
                else BoundedFormatter(self)
            is_format_map = value.__name__ == "format_map"

            @functools.wraps(value)
            def bounded(*args, **kwargs):
                if is_format_map:
                    if kwargs:
                        raise TypeError("format_map() takes no keyword arguments")
                    if len(args) != 1:
                        raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                    kwargs, args = args[0], ()
                out = type(owner)(formatter.vformat(owner, args, kwargs))
                spend("a str.format", len(out))
                return out

            return bounded

        def bounded_concat(self, pieces, markup):
            """`a ~ b`: the texts' sizes checked before they are converted and joined."""
            size = sum(text_size(piece) for piece in pieces)
            problem = _too_long("a ~ join", size)
            if problem:
                raise TemplateRefused(problem)
            spend("a ~ join", size)
            return markup_join(pieces) if markup else str_join(pieces)

        def checked_output(self, value):
            """`{{ value }}`: the value, its text's size checked before str() builds it."""
            if not isinstance(value, str):
                size = text_size(value)
                problem = _too_long("an output", size)
                if problem:
                    raise TemplateRefused(problem)
                spend("an output", size)
            return value

        def concat(self, pieces):
            """The join of a template's (or block's, or macro's) output, counted as it comes."""
            kept, total = [], 0
            for piece in pieces:
                total += len(piece)
                if total > MAX_RENDERED_CHARS:
                    raise TemplateRefused(_too_long("its output", total))
                kept.append(piece)
            return "".join(kept)

    return BoundedSandbox


@functools.cache
def use_bounded_sandbox() -> bool:
    """Have transformers compile chat templates in `bounded_sandbox()`, once per process; True
    when it does.

    transformers builds its ImmutableSandboxedEnvironment inside a private function
    (`transformers.utils.chat_template_utils._compile_jinja_template`, cached per template) and
    takes no other, so the module's name for the class is pointed at the subclass and that
    cache emptied: templates compile with transformers' own settings, extensions, filters and
    globals, only the three operators checked, and so does every later render in the process
    (a library's too). A transformers laid out otherwise is logged once and renders as before,
    within the syntax-tree check, the CPU timer and the output cap."""
    try:
        from transformers.utils import chat_template_utils as templates
    except ImportError:
        return False
    sandbox = bounded_sandbox()
    compile_template = getattr(templates, "_compile_jinja_template", None)
    if compile_template is not None and isinstance(getattr(templates, "ImmutableSandboxedEnvironment", None), type):
        if templates.ImmutableSandboxedEnvironment is not sandbox:
            templates.ImmutableSandboxedEnvironment = sandbox
            getattr(compile_template, "cache_clear", lambda: None)()
        try:
            if isinstance(compile_template("{{ 1 }}").environment, sandbox):
                return True
        except Exception:  # noqa: BLE001 - a layout this does not know: said below
            pass
    log.warning("chat templates render without the check of repeats through variables: this version "
                "of transformers does not compile them where mrtpo.chat expects")
    return False
