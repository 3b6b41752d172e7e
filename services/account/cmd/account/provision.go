package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/acme/platform/services/account"
)

// provisionFile describes accounts, users and definitions to make exist.
// Passwords are never in it: each user names a file holding its password
// (relative paths are relative to the provision file), e.g. a Docker or
// Kubernetes secret.
type provisionFile struct {
	Accounts []struct {
		Name  string `json:"name"`
		Users []struct {
			Username     string `json:"username"`
			PasswordFile string `json:"passwordFile"`
		} `json:"users"`
		Definitions []account.DefinitionInput `json:"definitions"`
	} `json:"accounts"`
}

// provision applies a provision file idempotently: what exists is left as
// it is (an existing user keeps its password, a definition with the same
// name and type is not created again), what is missing is created. Running
// it twice changes nothing the second time.
func provision(ctx context.Context, env adminEnv, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("file", "", "provision file (JSON)")
	if err := fs.Parse(args); err != nil || *file == "" || fs.NArg() > 0 {
		return errors.New("usage: account provision --file PROVISION.json")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return fmt.Errorf("read provision file: %w", err)
	}
	var spec provisionFile
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("provision file %s: %w", *file, err)
	}
	base := filepath.Dir(*file)
	for _, a := range spec.Accounts {
		acc, err := env.store.CreateAccount(ctx, a.Name)
		switch {
		case errors.Is(err, account.ErrDuplicate):
			if acc, err = env.store.AccountByName(ctx, a.Name); err != nil {
				return err
			}
			fmt.Fprintf(out, "account %s exists\n", acc.Name)
		case err != nil:
			return err
		default:
			fmt.Fprintf(out, "created account %s (id %s)\n", acc.Name, acc.ID)
		}
		for _, u := range a.Users {
			if err := provisionUser(ctx, env, acc, u.Username, resolve(base, u.PasswordFile), out); err != nil {
				return err
			}
		}
		if err := provisionDefinitions(ctx, env, acc, a.Definitions, out); err != nil {
			return err
		}
	}
	return nil
}

func resolve(base, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(base, path)
}

func provisionUser(ctx context.Context, env adminEnv, acc account.Account, username, passwordFile string, out io.Writer) error {
	if _, err := env.store.UserByName(ctx, acc.ID, username); err == nil {
		fmt.Fprintf(out, "user %s in account %s exists\n", account.NormalizeName(username), acc.Name)
		return nil
	} else if !errors.Is(err, account.ErrNotFound) {
		return err
	}
	if passwordFile == "" {
		return fmt.Errorf("user %s: passwordFile is required", username)
	}
	pw, err := readPassword(passwordFile, nil)
	if err != nil {
		return fmt.Errorf("user %s: %w", username, err)
	}
	users, err := env.userRules()
	if err != nil {
		return err
	}
	u, err := users.Create(ctx, ownerOf(acc), account.NewUser{Username: &username, Password: &pw})
	if err != nil {
		return fmt.Errorf("user %s: %w", username, err)
	}
	fmt.Fprintf(out, "created user %s in account %s (id %s)\n", u.Username, acc.Name, u.ID)
	return nil
}

func provisionDefinitions(ctx context.Context, env adminEnv, acc account.Account, inputs []account.DefinitionInput, out io.Writer) error {
	existing, err := env.store.ListDefinitions(ctx, acc.ID)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		d, err := in.Definition(acc.ID)
		if err != nil {
			return fmt.Errorf("definition in account %s: %w", acc.Name, err)
		}
		if containsDefinition(existing, d) {
			fmt.Fprintf(out, "definition %s (%s) in account %s exists\n", d.Name, d.Type, acc.Name)
			continue
		}
		created, err := env.store.CreateDefinition(ctx, d)
		if err != nil {
			return err
		}
		existing = append(existing, created)
		fmt.Fprintf(out, "created definition %s (%s) in account %s (id %s)\n", created.Name, created.Type, acc.Name, created.ID)
	}
	return nil
}

func containsDefinition(list []account.Definition, d account.Definition) bool {
	for _, e := range list {
		if e.Name == d.Name && e.Type == d.Type {
			return true
		}
	}
	return false
}
