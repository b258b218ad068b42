"""Seeded language detection (langdetect is random unless its seed is fixed)."""
from __future__ import annotations

import threading

_LOCK = threading.Lock()

#: IFEval's LANGUAGE_CODES (instructions_util.py): ISO 639-1 code -> name in the prompt text
LANGUAGE_CODES = {
    "en": "English", "es": "Spanish", "pt": "Portuguese", "ar": "Arabic", "hi": "Hindi",
    "fr": "French", "ru": "Russian", "de": "German", "ja": "Japanese", "it": "Italian",
    "bn": "Bengali", "uk": "Ukrainian", "th": "Thai", "ur": "Urdu", "ta": "Tamil",
    "te": "Telugu", "bg": "Bulgarian", "ko": "Korean", "pl": "Polish", "he": "Hebrew",
    "fa": "Persian", "vi": "Vietnamese", "ne": "Nepali", "sw": "Swahili", "kn": "Kannada",
    "mr": "Marathi", "gu": "Gujarati", "pa": "Punjabi", "ml": "Malayalam", "fi": "Finnish",
}


def detect_language(text: str) -> str | None:
    """langdetect's language code for `text` with seed 0, or None when it cannot tell.

    IFEval counts "cannot tell" (`LangDetectException`, e.g. no letters at all) as
    instruction followed; callers decide what None means.
    """
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException

    with _LOCK:  # the seed is global state: set it and detect under one lock
        DetectorFactory.seed = 0
        try:
            return detect(text)
        except LangDetectException:
            return None
