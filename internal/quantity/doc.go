// Package quantity reads the memory quantities that gpumux takes from people
// (annotations, environment variables, flags) by one rule, Rule: a whole
// number with a binary unit. It imports only the standard library, so that
// gpumux-remoted, which takes one in --fake-memory, need not import the
// share model.
package quantity
