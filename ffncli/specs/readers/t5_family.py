"""T5 and its variants as T5ForConditionalGeneration: T5 v1.0 and v1.1, mT5, UMT5, LongT5. Their
readers are the kit's (:mod:`ffncli.specs.hfconfig`, which other families' readers call too),
named here for the table."""

from __future__ import annotations

from ffncli.specs.hfconfig import t5_spec as t5_spec
from ffncli.specs.hfconfig import t5_variant_spec as t5_variant_spec
