package http

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// maxDefinitionBody is the contract's definitions body limit.
const maxDefinitionBody = 128 << 10

func decodeDefinition(c *echo.Context, accountID string) (account.Definition, error) {
	var in account.DefinitionInput
	if err := web.DecodeJSON(c, maxDefinitionBody, &in); err != nil {
		return account.Definition{}, err
	}
	return in.Definition(accountID) // a *validation.Error becomes a 400 problem
}

// callerAccount is the account every definition access is scoped by. The
// bearer middleware guarantees verified claims are present.
func callerAccount(c *echo.Context) string {
	claims, _ := token.ClaimsFromContext(c.Request().Context())
	return claims.AccountID
}

func handleListDefinitions(store account.DefinitionStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		list, err := store.ListDefinitions(c.Request().Context(), callerAccount(c))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, list)
	}
}

func handleCreateDefinition(store account.DefinitionStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		d, err := decodeDefinition(c, callerAccount(c))
		if err != nil {
			return err
		}
		created, err := store.CreateDefinition(c.Request().Context(), d)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Location", "/definitions/"+created.ID)
		return c.JSON(http.StatusCreated, created)
	}
}

// pathDefinitionID is the {id} of the path: a 404 unless it has the form
// of a definition id (account.ValidDefinitionID), checked before the store
// is asked, since an id of another form names nothing.
func pathDefinitionID(c *echo.Context) (string, error) {
	id := c.Param("id")
	if !account.ValidDefinitionID(id) {
		return "", account.ErrNotFound
	}
	return id, nil
}

func handleGetDefinition(store account.DefinitionStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathDefinitionID(c)
		if err != nil {
			return err
		}
		d, err := store.GetDefinition(c.Request().Context(), callerAccount(c), id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, d)
	}
}

func handleReplaceDefinition(store account.DefinitionStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathDefinitionID(c)
		if err != nil {
			return err
		}
		d, err := decodeDefinition(c, callerAccount(c))
		if err != nil {
			return err
		}
		d.ID = id
		replaced, err := store.ReplaceDefinition(c.Request().Context(), d)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, replaced)
	}
}

func handleDeleteDefinition(store account.DefinitionStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id, err := pathDefinitionID(c)
		if err != nil {
			return err
		}
		if err := store.DeleteDefinition(c.Request().Context(), callerAccount(c), id); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
