"""CLARINET: clarification questions that find the book. A retrieval distribution over any retriever's top-k,
question pools (an LLM's, sampled and deduplicated by meaning, or a fixed one) with a leak check, simulated users
(a deterministic oracle, an LLM, controls) and a real one (:func:`interactive_search`), language and explicit
posteriors that read null and negative answers for what they are, in-order / random / EIG / KL selection (answer
likelihoods from an LLM's log-probs or a similarity kernel), a distilled question generator, the game that plays
them, and per-query significance reports."""
from pyterrier_tot.clarinet.answers import Reading, is_null, read_answer
from pyterrier_tot.clarinet.distribution import RetrievalDistribution, softmax, top_mass
from pyterrier_tot.clarinet.game import ClarificationGame, GameTurn, update_belief
from pyterrier_tot.clarinet.interactive import HumanUser, SearchSession, interactive_search
from pyterrier_tot.clarinet.leaks import NameStats, forbidden, leaked, remove_names
from pyterrier_tot.clarinet.likelihood import LLMLikelihood, kernel_likelihoods
from pyterrier_tot.clarinet.posterior import ExplicitPosterior, LanguagePosterior
from pyterrier_tot.clarinet.questions import FALLBACK_QUESTIONS, GENERIC_QUESTIONS, Clarifier
from pyterrier_tot.clarinet.report import compare, paired, paired_table, per_query, plot_turns, turn_table
from pyterrier_tot.clarinet.selection import (
                                              FirstSelection,
                                              RandomSelection,
                                              UtilitySelection,
                                              expected_information_gain,
                                              kl_utility,
                                              selection,
)
from pyterrier_tot.clarinet.simulator import ConstantUser, OracleUser, UserSimulator, WrongBookUser

__all__ = ["Reading", "is_null", "read_answer", "RetrievalDistribution", "softmax", "top_mass", "ClarificationGame",
           "GameTurn", "update_belief", "HumanUser", "SearchSession", "interactive_search", "NameStats", "forbidden",
           "leaked", "remove_names", "LLMLikelihood", "kernel_likelihoods", "ExplicitPosterior", "LanguagePosterior",
           "FALLBACK_QUESTIONS", "GENERIC_QUESTIONS", "Clarifier", "compare", "paired", "paired_table", "per_query",
           "plot_turns", "turn_table", "FirstSelection", "RandomSelection", "UtilitySelection",
           "expected_information_gain", "kl_utility", "selection", "ConstantUser", "OracleUser", "UserSimulator",
           "WrongBookUser"]
